// Geometric augmentations under Kornia 0.9's names and conventions (augment.h has the overview):
// interpolation, padding and align_corners as Kornia's defaults. To be written: RandomAffine,
// RandomPerspective, RandomResizedCrop, RandomHorizontalFlip.
#pragma once

#include "xlaunch/augment/transform.h"
