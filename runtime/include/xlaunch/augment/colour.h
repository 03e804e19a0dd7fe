// Colour augmentations under Kornia 0.9's names and conventions (augment.h has the overview).
// To be written: ColorJitter (brightness, contrast, saturation in [max(0, 1 - v), 1 + v], hue in
// [-h, h], Kornia's order of application, clamped to [0, 1]) and Normalize(mean, std).
#pragma once

#include "xlaunch/augment/transform.h"
