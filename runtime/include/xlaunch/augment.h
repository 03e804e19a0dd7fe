// Batched random image augmentation on any device (docs/data-loading.md#augmentation-on-the-device):
// Kornia's augmentations, under Kornia's names and with Kornia 0.9's conventions, applied to a whole
// batch tensor at once, with random parameters drawn per sample.
//
//   namespace aug = xlaunch::augment;
//   auto pipeline = std::make_shared<aug::Sequential>(std::vector<std::shared_ptr<aug::Transform>>{
//       aug::make("ColorJitter", {{"brightness", {0.2}}, {"hue", {0.05}}, {"p", {0.8}}}),
//       aug::make("RandomAffine", {{"degrees", {15}}, {"translate", {0.1, 0.1}}}),
//       aug::make("RandomPerspective", {{"distortion_scale", {0.3}}})});
//   loader_options.augment = pipeline;       // the loader applies it on the batch's device, or:
//   at::Tensor out = (*pipeline)(images, aug::BatchKey{seed, epoch, sample_ids});
//
// Reproducibility: a sample's parameters depend only on (seed, epoch, the sample's id, the
// transform's position in the sequence), never on the batch it lands in, num_workers, the
// world size or the device. They are drawn on the host with xlaunch's Rng (the same sequence on
// every platform) and travel to the device as one small tensor, so a GPU batch and a CPU batch get
// the same parameters.
//
// Images: float (or double) [B, C, H, W] in [0, 1], C = 1 or 3 (colour transforms need 3), on any
// device; the result has the same shape, dtype and device (RandomResizedCrop: its output size).
#pragma once

#include "xlaunch/augment/args.h"
#include "xlaunch/augment/colour.h"
#include "xlaunch/augment/geometric.h"
#include "xlaunch/augment/sequential.h"
#include "xlaunch/augment/transform.h"
