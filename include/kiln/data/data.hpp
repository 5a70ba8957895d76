/// kiln::data in one include: datasets, readers, transforms, samplers, the loader and DeviceLoader.
#pragma once
#include "kiln/data/batch.hpp"
#include "kiln/data/cifar10.hpp"
#include "kiln/data/csv.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/data/device_loader.hpp"
#include "kiln/data/error.hpp"
#include "kiln/data/idx.hpp"
#include "kiln/data/loader.hpp"
#include "kiln/data/mnist.hpp"
#include "kiln/data/sampler.hpp"
#include "kiln/data/standardize.hpp"
#include "kiln/data/subset.hpp"
#include "kiln/data/transforms.hpp"
#include "kiln/expr/assign.hpp"  // kiln::assign, which tensor copy-assignment, fill and clone call
