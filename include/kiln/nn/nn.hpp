/// kiln::nn in one include: layers, Sequential, Model, losses.
#pragma once
#include "kiln/nn/activation.hpp"
#include "kiln/nn/conv2d.hpp"
#include "kiln/nn/flatten.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/linear.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/nn/model.hpp"
#include "kiln/nn/pool.hpp"
#include "kiln/nn/sequential.hpp"
#include "kiln/nn/softmax.hpp"
#include "kiln/optim/sgd.hpp"
