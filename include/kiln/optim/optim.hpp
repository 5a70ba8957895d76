/// kiln::optim in one include: SGD, Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, Adadelta,
/// gradient clipping, learning-rate schedulers, GradScaler.
#pragma once
#include "kiln/optim/adadelta.hpp"
#include "kiln/optim/adagrad.hpp"
#include "kiln/optim/adam.hpp"
#include "kiln/optim/adamax.hpp"
#include "kiln/optim/clip.hpp"
#include "kiln/optim/grad_scaler.hpp"
#include "kiln/optim/nadam.hpp"
#include "kiln/optim/radam.hpp"
#include "kiln/optim/rmsprop.hpp"
#include "kiln/optim/scheduler.hpp"
#include "kiln/optim/sgd.hpp"
