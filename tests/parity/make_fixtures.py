#!/usr/bin/python3
"""PyTorch-parity fixtures for kiln's layers, losses, optimizers, schedulers, gradient clipping and a
whole LeNet (forward, gradients, three optimizer steps).

Run (Debian's python3-torch 1.13, CPU; it imports only from /usr/bin/python3):

    /usr/bin/python3 tests/parity/make_fixtures.py [losses.json ...]

It rewrites tests/parity/fixtures/*.json (or only the files named). Everything is deterministic
(torch.manual_seed, float32, single-tensor optimizer code paths: foreach=False), so running it again
with the same torch gives the same files; another torch build may differ in the last bits of some
(layers.json, lenet.json, mlp.json), so rewrite only the fixtures a change needs. The C++
tests (tests/unit/optim/) read the committed files; CI does not need torch.

Fixture schema
--------------
A *tensor* is {"shape": [d0, d1, ...], "values": [v, ...]}: row-major float32 values, each written as
the shortest decimal that reads back as the same float32.

mlp.json
  torch_version   str
  seed            int     torch.manual_seed before building the model and drawing the data
  layers          str     the network: Sequential(Linear(13,16), ReLU, Linear(16,32), ReLU, Linear(32,1))
  state_dict      {name: tensor}   initial parameters, PyTorch state_dict names ("0.weight", "4.bias")
  input           tensor  [8, 13]
  target          tensor  [8, 1]
  output          tensor  [8, 1]   model(input)
  loss            float   MSELoss()(output, target) (mean reduction)
  grad            {name: tensor}   every parameter's .grad after loss.backward() from the initial state
  optimizers      [ {name: str, type: "SGD" | "Adam" | "AdamW" | "RMSprop" | "Adagrad" | "NAdam" | "RAdam" |
                           "Adamax" | "Adadelta",
                     options: {lr, momentum, dampening, weight_decay, nesterov} for SGD,
                              {lr, betas: [b1, b2], eps, weight_decay, amsgrad} for Adam/AdamW,
                              {lr, alpha, eps, weight_decay, momentum, centered} for RMSprop,
                              {lr, lr_decay, weight_decay, initial_accumulator_value, eps} for Adagrad,
                     steps: 3,
                     parameters: {name: tensor}} ]
                  each run starts from state_dict and repeats `steps` times, on the same batch:
                  zero_grad(); loss = MSE(model(input), target); loss.backward(); opt.step();
                  parameters are the state_dict after the last step.

mlp_maximize.json
  torch_version, seed, layers, state_dict, input, target   as in mlp.json (the same draws)
  optimizers      as in mlp.json, each with maximize=True in its options (SGD with momentum and with
                  Nesterov, Adam with L2 and amsgrad, AdamW, RMSprop centered with momentum and L2): the
                  gradient is negated before the weight decay, momentum and moments

mlp_adagrad.json
  torch_version, seed, layers, state_dict, input, target   as in mlp.json (the same draws)
  optimizers      as in mlp.json, type "Adagrad": torch's defaults; lr 5e-2, lr_decay 0.1, weight decay
                  1e-2, initial_accumulator_value 0.1; lr_decay 0.05, weight decay 1e-2, maximize=True

mlp_nadam_radam.json
  torch_version, seed, layers, state_dict, input, target   as in mlp.json (the same draws)
  optimizers      as in mlp.json but with steps: 8, type "NAdam" (options {lr, betas, eps, weight_decay,
                  momentum_decay}): torch's defaults; lr 1e-2, betas (0.8, 0.99), eps 1e-6, weight decay
                  1e-2, momentum_decay 1e-2; type "RAdam" (options {lr, betas, eps, weight_decay}):
                  torch's defaults; lr 1e-2, weight decay 1e-2. RAdam's steps 1 to 5 are un-rectified
                  (rho_t <= 5), 6 to 8 rectified

mlp_adamax_adadelta.json
  torch_version, seed, layers, state_dict, input, target   as in mlp.json (the same draws)
  optimizers      as in mlp.json, type "Adamax" (options {lr, betas, eps, weight_decay, maximize?}):
                  torch's defaults; lr 1e-2, betas (0.8, 0.99), eps 1e-6, weight decay 1e-2, maximize=True;
                  type "Adadelta" (options {lr, rho, eps, weight_decay, maximize?}): torch's defaults;
                  lr 0.5, rho 0.8, eps 1e-5, weight decay 1e-2, maximize=True

schedulers.json
  torch_version   str
  base_lr         float   the optimizer's lr before the scheduler is built (0.1)
  epochs          int     length of a sequence (30) unless the schedule gives its own `epochs`
  schedules       [ {name: str, torch: str (the PyTorch construction), plus its arguments
                     (StepLR: step_size, gamma; MultiStepLR: milestones, gamma; CosineAnnealingLR:
                     T_max, eta_min; linear warm-up: warmup_steps, start_factor and, when it hands over
                     to a cosine schedule, T_max, eta_min; ExponentialLR: gamma; LambdaLR, MultiplicativeLR:
                     none, the function is in `torch` (in a sequence: factor, what it returns); CosineAnnealingWarmRestarts: T_0, T_mult, eta_min;
                     ConstantLR: factor, total_iters; LinearLR: start_factor, end_factor, total_iters;
                     PolynomialLR: total_iters, power; ChainedScheduler: chain, [{scheduler: str (the
                     torch class), its arguments}] in the order built; SequentialLR: sequence (as
                     chain), milestones), optionally epochs: int, lr: [float] * epochs} ]
                  lr[0] is the lr right after construction, lr[e] after the e-th scheduler.step()
                  (each preceded by an optimizer.step()); float64 as Python prints it.
  plateaus        [ {name, torch, mode ("min"/"max"), factor, patience, threshold, threshold_mode
                     ("rel"/"abs"), cooldown, min_lr, metrics: [float] (30), lr: [float] (30)} ]
                  ReduceLROnPlateau from lr 0.1: lr[k] after the k-th step(metrics[k]) (each preceded
                  by an optimizer.step())
  one_cycle       [ {name, torch, optimizer ("SGD" with momentum 0.9 or none, "Adam"), max_lr,
                     total_steps, the options given (pct_start, anneal_strategy, base_momentum,
                     max_momentum, div_factor, final_div_factor, three_phase, cycle_momentum), lr:
                     [float], momentum: [float] (SGD's momentum or Adam's beta1)} ]
                  OneCycleLR from lr 0.1: lr[k] and momentum[k] after k scheduler steps, k = 0 ..
                  total_steps
  cyclic          [ {name, torch, base_lr, max_lr, step_size_up, steps, the options given
                     (step_size_down, mode, gamma, scale_fn (its text), scale_mode, cycle_momentum,
                     base_momentum, max_momentum), lr: [float], momentum: [float] (SGD's)} ]
                  CyclicLR on SGD (momentum 0.9, or none): lr[k] and momentum[k] after k scheduler
                  steps, k = 0 .. steps
  warm_restarts_fractional
                  [ {name, torch, T_0, T_mult, eta_min, calls: [float or null], lr: [float],
                     last_epoch: [int]} ]
                  CosineAnnealingWarmRestarts on SGD from lr 0.1, stepped as calls says (a number:
                  step(epoch), fractional epochs included; null: step()): lr[k] and last_epoch[k] after
                  k calls, k = 0 .. len(calls)

clip.json
  torch_version   str
  parts           [[shape], ...]   the gradients' shapes; kiln sees them concatenated (one arena)
  grad            tensor  the concatenated gradients before clipping, shape [total]
  cases           [ {max_norm: float, norm_type: float | "inf" | "-inf",
                     total_norm: float (what clip_grad_norm_ returned), clipped: tensor} ]
  order_zero      norm_type 0 (torch counts each parameter's nonzero elements, then the parameters
                  with any): {grad: tensor with some zeros, single: [ {max_norm, total_norm, clipped} ]
                  over that one parameter, model: {torch: str, grad: {name: tensor} ("2.bias" all zero),
                  cases: [ {max_norm, norm_type, total_norm, clipped: {name: tensor}} ],
                  frozen_layer_0: the model with layer 0's .grad None (frozen): {grad: {name: tensor}
                  (layer 2's, no zero), cases: [ {max_norm, norm_type (-inf, -2, 2, 0), total_norm, clipped:
                  {name: tensor} (layer 2's)}, {clip_value: -0.5, clipped} (clip_grad_value_) ]}}}

layers.json
  torch_version   str
  cases           [ {name: str, torch: str (the module, inside a one-layer Sequential, so its
                     parameters are "0.weight" / "0.bias"),
                     state_dict: {name: tensor} (empty for layers without parameters),
                     input: tensor, grad_output: tensor (dL/dy, drawn at random),
                     output: tensor (module(input)), grad_input: tensor (dL/dx),
                     grad: {name: tensor} (each parameter's dL/dp)} ]
                  every module in eval() mode (Dropout: the identity)

clip_coefficient.json
  torch_version   str
  cases           [ {grad: [a, b] (a Pythagorean pair: its 2-norm c is exact), max_norm: float,
                     clipped: tensor (torch's gradients after clip_grad_norm_), division_differs: bool
                     (max_norm / (c + 1e-6) rounds otherwise than torch's reciprocal(c + 1e-6) * max_norm)} ]

layers_strided.json
  torch_version   str
  cases           as in layers.json: Conv2d, MaxPool2d and AvgPool2d whose stride exceeds the kernel
                  (windows skip input rows and columns), on odd inputs [2, C, 7, 8] so that the last
                  rows or columns fall in no window, with padding 0 and 1; the pools' defaults
                  (ceil_mode=False; AvgPool2d count_include_pad=True, as kiln's)
                  conv2d_k2_s3, conv2d_k2_s3_p1          Conv2d(2, 3, 2, stride=3, padding=0 / 1)
                  conv2d_k1_s2, conv2d_k1_s2_p1          Conv2d(2, 3, 1, stride=2, padding=0 / 1)
                  max_pool2d_k2_s3, max_pool2d_k2_s3_p1  MaxPool2d(2, stride=3, padding=0 / 1)
                  avg_pool2d_k2_s3, avg_pool2d_k2_s3_p1  AvgPool2d(2, stride=3, padding=0 / 1)

layers_conv_modes.json
  torch_version   str
  cases           as in layers.json: Conv2d with dilation and groups
                  conv2d_dilation2                 Conv2d(3, 4, 3, padding=2, dilation=2), 9x7
                  conv2d_dilation3_s2              Conv2d(2, 3, 3, stride=2, dilation=3), 11x9
                  conv2d_groups2                   Conv2d(4, 6, 3, padding=1, groups=2), 7x6
                  conv2d_depthwise                 Conv2d(6, 6, 3, stride=2, padding=1, groups=6), 8x7
                  conv2d_depthwise_multiplier      Conv2d(3, 6, 3, padding=1, groups=3, bias=False), 6x5
                  conv2d_dilation2_groups2_s2      Conv2d(4, 8, 2, stride=2, padding=1, dilation=2, groups=2), 9x8

layers_padding.json
  torch_version   str
  cases           as in layers.json: the padding layers and Conv2d's padding modes, on [2, 3, 5, 6]
                  zero_pad2d                       ZeroPad2d((1, 2, 0, 3))
                  constant_pad2d                   ConstantPad2d(2, 3.5)
                  reflection_pad2d                 ReflectionPad2d((1, 3, 4, 0)) (4: the largest for H 5)
                  replication_pad2d                ReplicationPad2d((2, 7, 1, 0)) (7: more than W)
                  circular_pad2d                   CircularPad2d((1, 6, 2, 5)) (F.pad mode='circular'; torch
                                                   1.13 has no CircularPad2d: a module with torch 2.1's repr)
                  conv2d_reflect                   Conv2d(3, 4, 3, padding=1, padding_mode='reflect')
                  conv2d_replicate_s2_d2           Conv2d(3, 4, 3, stride=2, padding=2, dilation=2,
                                                   padding_mode='replicate')
                  conv2d_circular_groups           Conv2d(3, 6, 3, padding='same', groups=3, bias=False,
                                                   padding_mode='circular')

layers_upsample.json
  torch_version   str
  cases           as in layers.json: Upsample and Identity
                  upsample_nearest2                Upsample(scale_factor=2), [2, 3, 4, 5]
                  upsampling_nearest2d3            UpsamplingNearest2d(scale_factor=3), [2, 3, 3, 4]
                  upsample_bilinear2               Upsample(scale_factor=2, mode='bilinear'), [2, 3, 4, 5]
                  upsample_bilinear3               Upsample(scale_factor=3, mode='bilinear'), [2, 2, 5, 3]
                  identity                         Identity(), [2, 3, 2, 2]
                  upsample_bilinear2_align_corners Upsample(scale_factor=2, mode='bilinear', align_corners=True),
                                                   [2, 3, 4, 5]
                  upsampling_bilinear2d3           UpsamplingBilinear2d(scale_factor=3), [2, 2, 2, 3]
                  upsample_bicubic2                Upsample(scale_factor=2, mode='bicubic'), [2, 3, 4, 5]
                  upsample_bicubic3                Upsample(scale_factor=3, mode='bicubic'), [2, 2, 5, 3]
                  upsample_bicubic2_align_corners  Upsample(scale_factor=2, mode='bicubic', align_corners=True),
                                                   [2, 3, 4, 5]
                  upsample_bicubic3_align_corners  Upsample(scale_factor=3, mode='bicubic', align_corners=True),
                                                   [2, 2, 3, 2]

layers_pool_modes.json
  torch_version   str
  cases           as in layers.json: MaxPool2d and AvgPool2d with ceil_mode, AvgPool2d with
                  count_include_pad=False and divisor_override, on inputs [2, 3, H, W] where ceil mode adds
                  a last, partial window (5x7 for K 2; W 6 for K 3 stride 3 padding 1; H 8 for K 3 stride 2
                  padding 1) and where torch drops a last window that would start in the padding (H 5 for
                  K 2 stride 2 padding 1 and for K 3 stride 3 padding 1)
                  max_pool2d_ceil, avg_pool2d_ceil                  (2, ceil_mode=True), 5x7
                  max_pool2d_ceil_k2_s2_p1, avg_pool2d_ceil_k2_s2_p1  (2, 2, 1, ceil_mode=True), 5x6
                  max_pool2d_ceil_k3_s3_p1, avg_pool2d_ceil_k3_s3_p1  (3, 3, 1, ceil_mode=True), 5x6
                  max_pool2d_ceil_k3_s2_p1, avg_pool2d_ceil_k3_s2_p1  (3, 2, 1, ceil_mode=True), 8x7
                  avg_pool2d_exclude_pad             AvgPool2d(3, 2, 1, count_include_pad=False), 7x6
                  avg_pool2d_ceil_exclude_pad        AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), 8x7
                  avg_pool2d_ceil_k3_s3_p1_exclude_pad   AvgPool2d(3, 3, 1, ceil_mode=True, count_include_pad=False), 5x6
                  avg_pool2d_divisor                 AvgPool2d(2, divisor_override=3), 6x6
                  avg_pool2d_ceil_exclude_pad_divisor    AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False,
                                                     divisor_override=2), 8x7 (the override wins)
                  max_pool2d_dilation2               MaxPool2d(3, 1, 1, dilation=2), 7x6
                  max_pool2d_dilation3_ceil          MaxPool2d(2, 2, 0, dilation=3, ceil_mode=True), 8x9
                  max_pool2d_dilation2_s2_p1_ceil    MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True), 9x8

losses.json (each case, here and in elementwise_losses.json, also has options: the torch loss's settings,
  {reduction, ignore_index, label_smoothing, weight: bool, ...}, which the C++ tests check against kiln's)
  torch_version   str
  mse             {input: tensor, target: tensor, loss: float, grad: tensor}    MSELoss(), mean
  cross_entropy   {input: tensor [N, C] (logits, one row of large ones), target: [int] (labels),
                   loss: float, grad: tensor}                                     CrossEntropyLoss(), mean
  cross_entropy_ignore_index   the same keys, three rows labelled -100 (ignored: the mean runs over
                   the other three, their gradient rows are 0)
  mse_sum         the keys of mse                                                MSELoss(reduction='sum')
  cross_entropy_label_smoothing   the keys of cross_entropy, rows 1 and 4 labelled -100
                                                    CrossEntropyLoss(label_smoothing=0.1), mean
  cross_entropy_sum   the same input and labels    CrossEntropyLoss(reduction='sum', label_smoothing=0.1)
  mse_none        the keys of mse, plus grad_output: tensor (dL/dloss, drawn at random); loss: tensor
                  (each squared error)                                           MSELoss(reduction='none')
  cross_entropy_none   the input and labels of cross_entropy, plus grad_output: tensor [N]; loss: tensor [N]
                                                    CrossEntropyLoss(reduction='none')
  cross_entropy_none_smoothing   the input and labels of cross_entropy_label_smoothing (rows labelled -100),
                  the same keys as cross_entropy_none  CrossEntropyLoss(reduction='none', label_smoothing=0.1)
  cross_entropy_weight   the input and labels of cross_entropy_ignore_index, plus weight: [float] (one per
                  class); loss: float, grad: tensor   CrossEntropyLoss(weight=weight), mean (divided by the
                  weights of the rows that count)
  cross_entropy_weight_smoothing, cross_entropy_weight_sum, cross_entropy_weight_none
                  the input and labels of cross_entropy_label_smoothing, weight: [float]; loss (a tensor
                  and grad_output for 'none'), grad   CrossEntropyLoss(weight, reduction, label_smoothing
                  0.1 (0.2 for 'none'))
  nll_weight, nll_weight_none   nll's input and labels, weight; NLLLoss(weight, reduction)
  cross_entropy_probs, cross_entropy_probs_weight_smoothing, cross_entropy_probs_sum,
  cross_entropy_probs_none   the input of cross_entropy_label_smoothing, target: tensor [6, 10]
                  (probabilities: softmax rows, a one-hot row, a row not summing to 1), weight where
                  weighted; CrossEntropyLoss(weight, reduction, label_smoothing 0 / 0.1 / 0.1 / 0.2)
  nll             {input: tensor [N, C] (log_softmax of random logits), target: [int] (two rows labelled
                   -100), loss: float, grad: tensor}                              NLLLoss(), mean
  nll_sum         the same keys and input                                        NLLLoss(reduction='sum')
  nll_none        the same input, plus grad_output: tensor [N]; loss: tensor [N] NLLLoss(reduction='none')

elementwise_losses.json (each case, here and in elementwise_losses.json, also has options: the torch loss's settings,
  {reduction, ignore_index, label_smoothing, weight: bool, ...}, which the C++ tests check against kiln's)
  torch_version   str
  <case>          {input: tensor [6, 3], target: tensor [6, 3], loss: float (a tensor for 'none'), grad:
                   tensor, and grad_output: tensor for 'none'}; the inputs mix differences inside and
                   outside 1 (and an exact 0)
                  l1, l1_sum, l1_none                 L1Loss(reduction)
                  smooth_l1, smooth_l1_sum, smooth_l1_none, smooth_l1_beta_half_sum
                                                      SmoothL1Loss(reduction, beta 1; the last beta 0.5)
                  huber, huber_sum, huber_none, huber_delta_two_sum
                                                      HuberLoss(reduction, delta 1; the last delta 2)
                  bce_logits, bce_logits_sum, bce_logits_none          BCEWithLogitsLoss on logits
                                                      (two of magnitude 40) and targets in [0, 1]
                  bce_logits_pos_weight, bce_logits_pos_weight_none    ... plus pos_weight: [float] (3)
                  bce, bce_sum, bce_none              BCELoss(reduction) of probabilities in (0, 1)
                                                      against the bce_logits targets
                  kl_div, kl_div_sum, kl_div_batchmean, kl_div_none
                                                      KLDivLoss(reduction) of log_softmax rows against
                                                      softmax rows (one with an exact 0)
                  kl_div_log_target_batchmean, kl_div_log_target_none
                                                      ... with log_target=True against log_softmax rows

layers_softmax_dims.json
  torch_version   str
  cases           as in layers.json: Softmax and LogSoftmax along other dimensions, inputs N(0, 9)
                  softmax_channels                 Softmax(dim=1), [2, 3, 4, 5]
                  log_softmax_channels             LogSoftmax(dim=1), [2, 3, 4, 5]
                  softmax_last_of_three            Softmax(dim=-1), [2, 3, 5]
                  log_softmax_middle_of_three      LogSoftmax(dim=-2), [2, 4, 3]
                  softmax_batch                    Softmax(dim=0), [3, 4]

layers_sequence.json
  torch_version   str
  cases           as in layers.json: Linear over the last dimension of a rank-3 and a rank-4 input; PReLU
                  linear_sequence          Linear(6, 4), [2, 5, 6]
                  linear_rank4_no_bias     Linear(6, 3, bias=False), [3, 2, 4, 6]
                  prelu                    PReLU(), [4, 5]
                  prelu_channels           PReLU(3) with slopes [0.1, -0.5, 2], [2, 3, 4, 5]
                  prelu_features           PReLU(4) with slopes [0.3, 0, 1, -1.5], [5, 4]

init.json
  torch_version   str
  gains           [{nonlinearity: str, param: float or null, gain: float}]   torch.nn.init.calculate_gain
  fans            [{shape: [int], fan_in: int, fan_out: int}]   torch.nn.init._calculate_fan_in_and_fan_out
                  (Linear's and Conv2d's weight shapes, a grouped and a transposed convolution's)

elementwise_pow.json
  torch_version   str
  input_bits      [int]   float32 inputs as their bit patterns (JSON has no NaN, inf or -0.): 500 drawn
                          from N(0, 3^2), then -inf, -0., 0., inf, NaN, -1, 1, 1e20, -1e20, 1e-20, 1e-40
                          (subnormal), -2, 4
  cases           [{exponent: float, bits: [int]}]   torch.pow(input, exponent) as bit patterns, for the
                          exponents torch computes another way (2, 3, 0.5, -0.5, -1, -2: products,
                          sqrt, quotients) and some it does not (0, 1, 1.5, -3, 2.5)

factories.json
  torch_version   str
  arange          [{dtype ("float32" | "float64" | "int64" | "int32" | "uint8"), start, end, step (numbers),
                  values ([number]: float32 / float64 values, integers exact)}]   torch.arange(start, end, step,
                  dtype=dtype): fractional bounds into integer dtypes (truncated), negative steps, empty ranges
  linspace        [{dtype, start, end, steps (int), values}]   torch.linspace(start, end, steps, dtype=dtype):
                  steps 0, 1, 2, odd and even, decreasing, integer dtypes (truncating, uint8 wrapping -1)
  eye             [{n, m, values}]   torch.eye(n, m) as float32
  torch's CPU arange and linspace use a vectorised formula (base + k step from every eighth element) next to
  the scalar one kiln uses (start + i step), so float values agree within a few ulps, integers exactly.

elementwise_division.json
  torch_version   str
  x_bits, y_bits  [int]   float32 dividends and divisors as bit patterns: 400 pairs drawn (x from N(0, 10^2),
                          y from N(0, 3^2), a quarter of y integral), then every pair of the special values
                          -inf, -3, -0., 0., 2.5, inf, NaN, 1e-30, 1e30
  fmod_bits, remainder_bits, floor_divide_bits   [int]   torch.fmod / remainder / floor_divide(x, y)
  i, j            [int]   int64 dividends and divisors (no zero divisor: torch raises there), drawn and at
                          the edges (-2^63 + 1, 2^63 - 1, +-1)
  i_fmod, i_remainder, i_floor_divide   [int]   the same of i and j, int64

losses_k_dim.json
  torch_version   str
  cases           {name: {loss_class ("CrossEntropyLoss"/"NLLLoss"), options (as losses.json's), weight
                  ([float], when options.weight), input (tensor [N, C, d1, ..., dk]: logits, or log_softmax
                  along 1 for NLLLoss), target (labels {"shape", "values": [int]}, or a probability tensor
                  of the input's shape), grad_output (tensor of the labels' shape, reduction 'none' only),
                  loss (a float, or a tensor for 'none'), grad (tensor: the input's gradient)}}
                  torch's K-dimensional losses: images [2, 4, 3, 5] and sequences [3, 5, 4], with
                  ignore_index, class weights, label smoothing, sum and 'none', probability targets

lenet.json
  torch_version   str
  layers          str     the seeds' LeNet on [N, 3, 32, 32]
  state_dict      {name: tensor}
  input           tensor  [4, 3, 32, 32]
  target          [int]   4 labels
  output          tensor  [4, 10] logits
  loss            float   CrossEntropyLoss()(output, target)
  grad            {name: tensor}
  optimizers      as in mlp.json: SGD (momentum) and Adam (eps 1e-4), 3 steps on the same batch from
                  state_dict
"""
import copy
import json
import math
import os
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
SEED = 0
STEPS = 3


def f32(values):
    """Shortest decimal strings that read back as the same float32, as JSON numbers."""
    return [float(repr(np.float32(v))) for v in np.asarray(values, dtype=np.float32).ravel()]


def tensor(t):
    t = t.detach().to(torch.float32).contiguous()
    return {"shape": list(t.shape), "values": f32(t.numpy())}


def loss_options(loss_fn):
    """The settings of a torch loss module, written into its case as "options": the C++ tests check that
    the kiln loss they build has the same (tests/support/loss_options.hpp, kiln::test::check_loss_options), so a case changed
    here without the test fails there instead of comparing two different losses."""
    options = {k: getattr(loss_fn, k) for k in ("reduction", "ignore_index", "label_smoothing", "beta", "delta",
                                                "log_target") if hasattr(loss_fn, k)}
    for k in ("weight", "pos_weight"):
        if hasattr(loss_fn, k):
            options[k] = getattr(loss_fn, k) is not None  # (the values are the case's own "weight"/"pos_weight")
    return options


def loss_case(loss_fn, source, target, reduction, **extra):
    """One case of a loss: loss_fn(x, target) of a fresh copy x of source, and the gradient of the loss
    itself, or for reduction 'none' of a random upstream gradient (drawn here, after the loss)."""
    x = source.detach().clone().requires_grad_(True)
    loss = loss_fn(x, target)
    case = {"input": tensor(x), "target": target.tolist() if target.dtype == torch.int64 else tensor(target),
            "options": loss_options(loss_fn), **extra}
    if reduction == "none":
        upstream = torch.randn(loss.shape)
        loss.backward(upstream)
        case.update(grad_output=tensor(upstream), loss=tensor(loss))
    else:
        loss.backward()
        case["loss"] = f32([loss.item()])[0]
    case["grad"] = tensor(x.grad)
    return case


def make_mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(13, 16), torch.nn.ReLU(),
        torch.nn.Linear(16, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 1))


def optimizer_runs(make_model, initial, configs, loss_fn, x, target, steps=STEPS):
    """Each (name, torch.optim class name, options): `steps` steps on (x, target) from `initial`."""
    runs = []
    for name, kind, options in configs:
        m = make_model()
        m.load_state_dict(initial)
        opt = getattr(torch.optim, kind)(m.parameters(), foreach=False, **options)
        for _ in range(steps):
            opt.zero_grad()
            loss_fn(m(x), target).backward()
            opt.step()
        opts = dict(options)
        if "betas" in opts:
            opts["betas"] = list(opts["betas"])
        runs.append({"name": name, "type": kind, "options": opts, "steps": steps,
                     "parameters": {k: tensor(v) for k, v in m.state_dict().items()}})
    return runs


def mlp_draws():
    """mlp.json's model (its initial state_dict) and batch, drawn after torch.manual_seed(SEED)."""
    torch.manual_seed(SEED)
    model = make_mlp()
    x = torch.randn(8, 13)
    target = torch.randn(8, 1)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    return model, x, target, initial


def mlp_fixture():
    model, x, target, initial = mlp_draws()
    loss_fn = torch.nn.MSELoss()

    out = model(x)
    loss = loss_fn(out, target)
    loss.backward()
    grad = {name: tensor(p.grad) for name, p in model.named_parameters()}

    configs = [
        ("sgd_momentum", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-4, nesterov=False)),
        ("sgd_nesterov", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-4, nesterov=True)),
        ("adam", "Adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False)),
        ("adamw", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False)),
        ("adam_l2_amsgrad", "Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-8, weight_decay=1e-2, amsgrad=True)),
        ("adamw_amsgrad", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=True)),
        # (lr 1e-3: the first steps move every parameter by lr / sqrt(1 - alpha) whatever its gradient, so
        # at 1e-2 a gradient that nearly cancels made the run sensitive to the batch's summation order)
        ("rmsprop", "RMSprop", dict(lr=1e-3, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False)),
        ("rmsprop_centered_momentum_l2", "RMSprop",
         dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=1e-2, momentum=0.9, centered=True)),
    ]
    runs = mlp_runs_fixture(configs)  # the same draws, then the optimizer runs
    optimizers = runs.pop("optimizers")
    return {**runs, "output": tensor(out), "loss": f32([loss.item()])[0], "grad": grad, "optimizers": optimizers}


def mlp_file(x, target, initial, runs):
    """A file of optimizer runs on mlp.json's model: its batch and initial weights, and the runs."""
    return {
        "torch_version": torch.__version__,
        "seed": SEED,
        "layers": "Sequential(Linear(13,16), ReLU, Linear(16,32), ReLU, Linear(32,1))",
        "state_dict": {k: tensor(v) for k, v in initial.items()},
        "input": tensor(x),
        "target": tensor(target),
        "optimizers": runs,
    }


def mlp_runs_fixture(configs, steps=STEPS):
    """mlp.json's model, batch and initial weights with the optimizer runs of `configs` (name, torch
    optimizer, its keyword arguments; `steps` steps each), in a file of their own."""
    _, x, target, initial = mlp_draws()
    return mlp_file(x, target, initial,
                    optimizer_runs(make_mlp, initial, configs, torch.nn.MSELoss(), x, target, steps))


def mlp_maximize_fixture():
    """mlp.json's optimizer runs with maximize=True. A file of its own: rewriting mlp.json with another
    torch build would change the last bits of its other values."""
    return mlp_runs_fixture([
        ("sgd_momentum_maximize", "SGD",
         dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=False, maximize=True)),
        ("sgd_nesterov_maximize", "SGD",
         dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=True, maximize=True)),
        ("adam_l2_amsgrad_maximize", "Adam",
         dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-8, weight_decay=1e-2, amsgrad=True, maximize=True)),
        ("adamw_maximize", "AdamW",
         dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=False, maximize=True)),
        ("rmsprop_centered_momentum_l2_maximize", "RMSprop",
         dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=1e-2, momentum=0.9, centered=True, maximize=True)),
    ])


def mlp_adagrad_fixture():
    """mlp.json's model and batch under Adagrad: torch's defaults; lr_decay, L2 and a starting
    accumulator; those with maximize=True."""
    return mlp_runs_fixture([
        ("adagrad", "Adagrad", dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10)),
        ("adagrad_decay_l2_accumulator", "Adagrad",
         dict(lr=5e-2, lr_decay=0.1, weight_decay=1e-2, initial_accumulator_value=0.1, eps=1e-10)),
        ("adagrad_decay_l2_maximize", "Adagrad",
         dict(lr=1e-2, lr_decay=0.05, weight_decay=1e-2, initial_accumulator_value=0.0, eps=1e-10, maximize=True)),
    ])


def mlp_nadam_radam_fixture():
    """mlp.json's model and batch under NAdam and RAdam, 8 steps each (RAdam's steps 6 to 8 are its
    rectified ones: rho_t > 5 from step 6 with beta2 0.999): torch's defaults; L2 (and NAdam's momentum
    decay) with a larger learning rate."""
    return mlp_runs_fixture([
        ("nadam", "NAdam", dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3)),
        ("nadam_l2_momentum_decay", "NAdam",
         dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, momentum_decay=1e-2)),
        ("radam", "RAdam", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
        ("radam_l2", "RAdam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)),
    ], steps=8)


def mlp_adamax_adadelta_fixture():
    """mlp.json's model and batch under Adamax and Adadelta: torch's defaults; L2, other betas / rho and
    eps, with maximize=True."""
    return mlp_runs_fixture([
        ("adamax", "Adamax", dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
        ("adamax_l2_betas_maximize", "Adamax",
         dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, maximize=True)),
        ("adadelta", "Adadelta", dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0)),
        ("adadelta_l2_rho_maximize", "Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=1e-2, maximize=True)),
    ])


def grouped(model, groups):
    """torch's param_groups for `groups` (names and options): group 0 the parameters no group names."""
    named = dict(model.named_parameters())
    listed = {n for g in groups for n in g["params"]}
    out = [{"params": [p for n, p in model.named_parameters() if n not in listed]}]
    for g in groups:
        out.append({"params": [named[n] for n in g["params"]], **{k: v for k, v in g.items() if k != "params"}})
    return out


def make_scheduler(opt, spec):
    S = torch.optim.lr_scheduler
    kind = spec["type"]
    if kind == "SequentialLR":
        parts = [make_scheduler(opt, part) for part in spec["schedulers"]]
        return S.SequentialLR(opt, parts, milestones=spec["milestones"])
    return getattr(S, kind)(opt, **{k: v for k, v in spec.items() if k != "type"})


def mlp_param_groups_fixture():
    """mlp.json's model and batch with parameter groups: group 1 the biases without weight decay, group
    2 the last weight with three times the lr (group 0 the other weights, the optimizer's options), for
    every optimizer; then with schedulers stepped after each step, recording every group's lr."""
    _, x, target, initial = mlp_draws()
    groups = lambda lr: [{"params": ["0.bias", "2.bias", "4.bias"], "weight_decay": 0.0},
                         {"params": ["4.weight"], "lr": 3 * lr}]
    configs = [
        ("sgd_nesterov", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=True), None),
        ("adam_l2", "Adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False), None),
        ("adamw_amsgrad", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=True), None),
        ("rmsprop_centered_momentum_l2", "RMSprop",
         dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=1e-2, momentum=0.9, centered=True), None),
        ("adagrad_decay_l2", "Adagrad",
         dict(lr=5e-2, lr_decay=0.1, weight_decay=1e-2, initial_accumulator_value=0.1, eps=1e-10), None),
        ("nadam_l2", "NAdam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, momentum_decay=1e-2), None),
        ("radam_l2", "RAdam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2), None),
        ("adamax_l2", "Adamax", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2), None),
        ("adadelta_l2", "Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=1e-2), None),
        ("adamw_cosine", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=False),
         {"type": "CosineAnnealingLR", "T_max": 3, "eta_min": 1e-3}),
        ("sgd_step", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=False),
         {"type": "StepLR", "step_size": 2, "gamma": 0.5}),
        ("sgd_onecycle", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=False),
         {"type": "OneCycleLR", "max_lr": 0.05, "total_steps": 8}),
        ("adam_sequential", "Adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False),
         {"type": "SequentialLR", "milestones": [2],
          "schedulers": [{"type": "LinearLR", "start_factor": 0.5, "end_factor": 1.0, "total_iters": 2},
                         {"type": "ExponentialLR", "gamma": 0.9}]}),
    ]
    runs = []
    for name, kind, options, scheduler in configs:
        m = make_mlp()
        m.load_state_dict(initial)
        group_specs = groups(options["lr"])
        opt = getattr(torch.optim, kind)(grouped(m, group_specs), foreach=False, **options)
        sched = make_scheduler(opt, scheduler) if scheduler else None
        lrs = []
        steps = 4 if scheduler else STEPS
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.MSELoss()(m(x), target).backward()
            opt.step()
            if sched:
                sched.step()
                lrs.append([g["lr"] for g in opt.param_groups])
        opts = dict(options)
        if "betas" in opts:
            opts["betas"] = list(opts["betas"])
        run = {"name": name, "type": kind, "options": opts, "steps": steps, "groups": group_specs,
               "parameters": {k: tensor(v) for k, v in m.state_dict().items()}}
        if scheduler:
            run["scheduler"] = scheduler
            run["lrs"] = lrs
        runs.append(run)
    return mlp_file(x, target, initial, runs)


def mlp_frozen_fixture():
    """mlp.json's model and batch with its first layers frozen (requires_grad_(False) on model[:freeze]:
    their grads stay None, so every optimizer skips them), for every optimizer; freeze 1 and 3 split a
    Linear from its ReLU; SGD with momentum unfrozen after 2 of 4 steps (its momentum buffer starts
    then), AdamW with parameter groups over frozen and trainable parameters."""
    _, x, target, initial = mlp_draws()
    configs = [
        ("sgd_momentum_l2", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=False), 2),
        ("adam_l2", "Adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False), 1),
        ("adamw_amsgrad", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=True), 3),
        ("rmsprop_centered_momentum_l2", "RMSprop",
         dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=1e-2, momentum=0.9, centered=True), 2),
        ("adagrad_decay_l2", "Adagrad",
         dict(lr=5e-2, lr_decay=0.1, weight_decay=1e-2, initial_accumulator_value=0.1, eps=1e-10), 4),
        ("nadam_l2", "NAdam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, momentum_decay=1e-2), 2),
        ("radam_l2", "RAdam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2), 2),
        ("adamax_l2", "Adamax", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2), 1),
        ("adadelta_l2", "Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=1e-2), 3),
    ]
    extra = [
        ("sgd_momentum_unfrozen_after_2", "SGD",
         dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=False), 2, {"unfreeze_after": 2}),
        ("adamw_groups", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=False), 2,
         {"groups": [{"params": ["0.bias", "2.bias", "4.bias"], "weight_decay": 0.0},
                     {"params": ["0.weight", "4.weight"], "lr": 3e-2}]}),
    ]
    runs = []
    for name, kind, options, freeze, *more in [c + ({},) for c in configs] + extra:
        more = more[0]
        m = make_mlp()
        m.load_state_dict(initial)
        m[:freeze].requires_grad_(False)
        params = grouped(m, more["groups"]) if "groups" in more else m.parameters()
        opt = getattr(torch.optim, kind)(params, foreach=False, **options)
        steps = STEPS + 1 if "unfreeze_after" in more else STEPS
        for s in range(steps):
            if s == more.get("unfreeze_after"):
                m.requires_grad_(True)
            opt.zero_grad()
            torch.nn.MSELoss()(m(x), target).backward()
            opt.step()
        opts = dict(options)
        if "betas" in opts:
            opts["betas"] = list(opts["betas"])
        run = {"name": name, "type": kind, "options": opts, "steps": steps, "freeze": freeze,
               "parameters": {k: tensor(v) for k, v in m.state_dict().items()}, **more}
        runs.append(run)
    return mlp_file(x, target, initial, runs)


def mlp_freeze_schedule_fixture():
    """mlp.json's model and batch with a different prefix frozen at each step ("freeze_schedule": step s
    runs with model[:k_s].requires_grad_(False), the rest trainable) and grads set to None between steps,
    so torch's optimizers step each parameter only while it is trainable and count its steps
    (state["step"]) alone: 3, 3, 1, 0, 0, 2, 0 leaves 0.* with 3 steps, 2.* with 5 and 4.* with 7, for
    every optimizer whose step depends on its count, AdamW with groups across those runs, and SGD with a
    dampened momentum (each parameter's buffer starts at its own first step)."""
    _, x, target, initial = mlp_draws()
    schedule = [3, 3, 1, 0, 0, 2, 0]
    configs = [
        ("adam_l2", "Adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False), {}),
        ("adamw_amsgrad", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=True), {}),
        ("adagrad_decay_l2", "Adagrad",
         dict(lr=5e-2, lr_decay=0.1, weight_decay=1e-2, initial_accumulator_value=0.1, eps=1e-10), {}),
        ("nadam_l2", "NAdam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2, momentum_decay=1e-2), {}),
        # beta2 0.9: rho_t passes 5 at step 6, so the runs at 3 and 5 steps are unrectified while 4.* is
        ("radam_l2", "RAdam", dict(lr=1e-2, betas=(0.9, 0.9), eps=1e-8, weight_decay=1e-2), {}),
        ("adamax_l2", "Adamax", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2), {}),
        ("rmsprop_centered_momentum_l2", "RMSprop",
         dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=1e-2, momentum=0.9, centered=True), {}),
        ("adadelta_l2", "Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=1e-2), {}),
        ("adamw_groups", "AdamW", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-1, amsgrad=False),
         {"groups": [{"params": ["0.bias", "2.bias", "4.bias"], "weight_decay": 0.0},
                     {"params": ["0.weight", "4.weight"], "lr": 3e-2}]}),
        # no count, but each parameter's momentum buffer starts (buf = g, undampened) at its first step
        ("sgd_momentum_dampening_l2", "SGD",
         dict(lr=0.01, momentum=0.9, dampening=0.3, weight_decay=1e-2, nesterov=False), {}),
    ]
    runs = []
    for name, kind, options, more in configs:
        m = make_mlp()
        m.load_state_dict(initial)
        params = grouped(m, more["groups"]) if "groups" in more else m.parameters()
        opt = getattr(torch.optim, kind)(params, foreach=False, **options)
        for k in schedule:
            m.requires_grad_(True)
            m[:k].requires_grad_(False)
            opt.zero_grad(set_to_none=True)  # a frozen parameter has no grad (torch 2's default)
            torch.nn.MSELoss()(m(x), target).backward()
            opt.step()
        counts = {n: int(opt.state[p]["step"]) for n, p in m.named_parameters() if "step" in opt.state[p]}
        assert kind == "SGD" or (counts["0.weight"], counts["2.weight"], counts["4.weight"]) == (3, 5, 7), counts
        opts = dict(options)
        if "betas" in opts:
            opts["betas"] = list(opts["betas"])
        runs.append({"name": name, "type": kind, "options": opts, "steps": len(schedule), "freeze": schedule[0],
                     "freeze_schedule": schedule, "step_counts": counts,
                     "parameters": {k: tensor(v) for k, v in m.state_dict().items()}, **more})
    return mlp_file(x, target, initial, runs)


def lr_sequence(make_scheduler, base_lr, epochs):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make_scheduler(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(epochs - 1):
        opt.step()  # no gradient: a no-op, but the order PyTorch expects
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def cycled(make_opt, make, steps):
    """A per-batch schedule that cycles the momentum (OneCycleLR, CyclicLR) on one parameter: the lr and
    the momentum (SGD's, or Adam's beta1) after k scheduler steps, k = 0 .. steps."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = make_opt([p])
    sched = make(opt)
    group = opt.param_groups[0]
    lrs, momenta = [], []
    for step in range(steps + 1):
        if step > 0:
            opt.step()
            sched.step()
        lrs.append(group["lr"])
        momenta.append(group["betas"][0] if "betas" in group else group["momentum"])
    return {"lr": lrs, "momentum": momenta}


def schedulers_fixture():
    S = torch.optim.lr_scheduler
    base_lr, epochs = 0.1, 30
    specs = [
        ({"name": "step_lr", "torch": "StepLR(step_size=7, gamma=0.1)", "step_size": 7, "gamma": 0.1},
         lambda o: S.StepLR(o, step_size=7, gamma=0.1)),
        ({"name": "multi_step_lr", "torch": "MultiStepLR(milestones=[5, 12], gamma=0.5)", "milestones": [5, 12],
          "gamma": 0.5},
         lambda o: S.MultiStepLR(o, milestones=[5, 12], gamma=0.5)),
        ({"name": "cosine_annealing_lr", "torch": "CosineAnnealingLR(T_max=10, eta_min=1e-4)", "T_max": 10,
          "eta_min": 1e-4},
         lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=1e-4)),
        ({"name": "linear_warmup", "torch": "LinearLR(start_factor=0.25, total_iters=4)", "warmup_steps": 4,
          "start_factor": 0.25},
         lambda o: S.LinearLR(o, start_factor=0.25, total_iters=4)),
        ({"name": "linear_warmup_cosine",
          "torch": "SequentialLR([LinearLR(start_factor=0.1, total_iters=5), "
                   "CosineAnnealingLR(T_max=10, eta_min=1e-4)], milestones=[5])",
          "warmup_steps": 5, "start_factor": 0.1, "T_max": 10, "eta_min": 1e-4},
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=5),
                                      S.CosineAnnealingLR(o, T_max=10, eta_min=1e-4)], milestones=[5])),
    ]
    specs.append(({"name": "exponential_lr", "torch": "ExponentialLR(gamma=0.9)", "gamma": 0.9},
                  lambda o: S.ExponentialLR(o, gamma=0.9)))
    specs.append(({"name": "lambda_lr", "torch": "LambdaLR(lambda e: 1 / (1 + 0.1 * e))"},
                  lambda o: S.LambdaLR(o, lambda e: 1 / (1 + 0.1 * e))))
    specs.append(({"name": "multiplicative_lr", "torch": "MultiplicativeLR(lambda e: 0.8 if e % 3 == 0 else 0.95)"},
                  lambda o: S.MultiplicativeLR(o, lambda e: 0.8 if e % 3 == 0 else 0.95)))
    specs.append(({"name": "cosine_warm_restarts", "torch": "CosineAnnealingWarmRestarts(T_0=4, T_mult=2, eta_min=1e-3)",
                   "T_0": 4, "T_mult": 2, "eta_min": 1e-3},
                  lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=1e-3)))
    specs.append(({"name": "cosine_warm_restarts_fixed", "torch": "CosineAnnealingWarmRestarts(T_0=7)",
                   "T_0": 7, "T_mult": 1, "eta_min": 0.0},
                  lambda o: S.CosineAnnealingWarmRestarts(o, T_0=7)))
    # torch 1.13's ConstantLR, LinearLR and PolynomialLR over 8 epochs, past their total_iters.
    specs.append(({"name": "constant_lr", "torch": "ConstantLR(factor=0.5, total_iters=3)", "factor": 0.5,
                   "total_iters": 3, "epochs": 8},
                  lambda o: S.ConstantLR(o, factor=0.5, total_iters=3)))
    specs.append(({"name": "linear_lr", "torch": "LinearLR(start_factor=0.25, end_factor=0.75, total_iters=4)",
                   "start_factor": 0.25, "end_factor": 0.75, "total_iters": 4, "epochs": 8},
                  lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=4)))
    specs.append(({"name": "polynomial_lr", "torch": "PolynomialLR(total_iters=4, power=2.0)", "total_iters": 4,
                   "power": 2.0, "epochs": 8},
                  lambda o: S.PolynomialLR(o, total_iters=4, power=2.0)))
    # ChainedScheduler: the schedules built one after another on the optimizer, in the list's order.
    chains = [
        ("chained_exponential_multi_step",
         [{"scheduler": "ExponentialLR", "gamma": 0.9}, {"scheduler": "MultiStepLR", "milestones": [2], "gamma": 0.1}],
         lambda o: [S.ExponentialLR(o, gamma=0.9), S.MultiStepLR(o, milestones=[2], gamma=0.1)]),
        ("chained_step_linear",
         [{"scheduler": "StepLR", "step_size": 7, "gamma": 0.5},
          {"scheduler": "LinearLR", "start_factor": 0.25, "total_iters": 4}],
         lambda o: [S.StepLR(o, step_size=7, gamma=0.5), S.LinearLR(o, start_factor=0.25, total_iters=4)]),
        ("chained_cosine_exponential",
         [{"scheduler": "CosineAnnealingLR", "T_max": 30, "eta_min": 0.0}, {"scheduler": "ExponentialLR", "gamma": 0.95}],
         lambda o: [S.CosineAnnealingLR(o, T_max=30, eta_min=0), S.ExponentialLR(o, gamma=0.95)]),
        ("chained_multi_step_linear_step",
         [{"scheduler": "MultiStepLR", "milestones": [0, 5], "gamma": 0.5},
          {"scheduler": "LinearLR", "start_factor": 0.5, "total_iters": 3},
          {"scheduler": "StepLR", "step_size": 4, "gamma": 0.8}],
         lambda o: [S.MultiStepLR(o, milestones=[0, 5], gamma=0.5), S.LinearLR(o, start_factor=0.5, total_iters=3),
                    S.StepLR(o, step_size=4, gamma=0.8)]),
        ("chained_polynomial_linear_constant",
         [{"scheduler": "PolynomialLR", "total_iters": 30, "power": 2.0},
          {"scheduler": "LinearLR", "start_factor": 0.25, "end_factor": 0.75, "total_iters": 4},
          {"scheduler": "ConstantLR", "factor": 0.5, "total_iters": 3}],
         lambda o: [S.PolynomialLR(o, total_iters=30, power=2.0),
                    S.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=4),
                    S.ConstantLR(o, factor=0.5, total_iters=3)]),
    ]
    for name, chain, make in chains:
        built = ", ".join(c["scheduler"] + "(" + ", ".join(f"{k}={v}" for k, v in c.items() if k != "scheduler") + ")"
                          for c in chain)
        specs.append(({"name": name, "torch": f"ChainedScheduler([{built}])", "chain": chain},
                      lambda o, make=make: S.ChainedScheduler(make(o))))
    # SequentialLR: the schedules built one after another on the optimizer, then handed over at the
    # milestones (each from torch's initial_lr, restarted at its epoch 0).
    sequences = [
        ("sequential_lr",
         [{"scheduler": "ConstantLR", "factor": 0.5, "total_iters": 2}, {"scheduler": "ExponentialLR", "gamma": 0.9},
          {"scheduler": "StepLR", "step_size": 2, "gamma": 0.5}], [3, 6], 12,
         lambda o: [S.ConstantLR(o, factor=0.5, total_iters=2), S.ExponentialLR(o, gamma=0.9),
                    S.StepLR(o, step_size=2, gamma=0.5)]),
        # A MultiplicativeLR handed over to (step(0): no closed form) keeps the lr it finds, twice in a row.
        ("sequential_multiplicative",
         [{"scheduler": "ExponentialLR", "gamma": 0.5}, {"scheduler": "MultiplicativeLR", "factor": 0.9},
          {"scheduler": "MultiplicativeLR", "factor": 0.8}], [3, 6], 10,
         lambda o: [S.ExponentialLR(o, gamma=0.5), S.MultiplicativeLR(o, lambda e: 0.9),
                    S.MultiplicativeLR(o, lambda e: 0.8)]),
        # kiln's LinearWarmup(MultiplicativeLR(...), 4, 0.25) in torch's words.
        ("linear_warmup_multiplicative",
         [{"scheduler": "LinearLR", "start_factor": 0.25, "end_factor": 1.0, "total_iters": 4},
          {"scheduler": "MultiplicativeLR", "factor": 0.9}], [4], 10,
         lambda o: [S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4),
                    S.MultiplicativeLR(o, lambda e: 0.9)]),
    ]
    for name, sequence, milestones, length, make in sequences:
        built = ", ".join(c["scheduler"] + "(" + ", ".join(f"{k}={v}" for k, v in c.items() if k != "scheduler") + ")"
                          for c in sequence)
        specs.append(({"name": name, "torch": f"SequentialLR([{built}], milestones={milestones})",
                       "sequence": sequence, "milestones": milestones, "epochs": length},
                      lambda o, make=make, milestones=milestones: S.SequentialLR(o, make(o), milestones=milestones)))
    schedules = []
    for spec, make in specs:
        entry = dict(spec)
        entry["lr"] = lr_sequence(make, base_lr, spec.get("epochs", epochs))
        schedules.append(entry)
    # ReduceLROnPlateau: the lr after each step(metric) over a made-up validation curve (improving, then
    # flat with noise, a relapse, a new best), under two configurations.
    metrics = [1.0, 0.8, 0.7, 0.69995, 0.7, 0.71, 0.6, 0.6, 0.61, 0.62, 0.59, 0.5899, 0.59, 0.6, 0.61,
               0.4, 0.41, 0.42, 0.43, 0.44, 0.45, 0.3, 0.31, 0.32, 0.33, 0.34, 0.35, 0.36, 0.37, 0.38]
    plateaus = []
    for spec, make in (
            ({"name": "plateau_min", "torch": "ReduceLROnPlateau(mode='min', factor=0.5, patience=2)",
              "mode": "min", "factor": 0.5, "patience": 2, "threshold": 1e-4, "threshold_mode": "rel",
              "cooldown": 0, "min_lr": 0.0},
             lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2)),
            ({"name": "plateau_max_abs_cooldown",
              "torch": "ReduceLROnPlateau(mode='max', factor=0.2, patience=1, threshold=0.01, "
                       "threshold_mode='abs', cooldown=2, min_lr=0.005)",
              "mode": "max", "factor": 0.2, "patience": 1, "threshold": 0.01, "threshold_mode": "abs",
              "cooldown": 2, "min_lr": 0.005},
             lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.2, patience=1, threshold=0.01,
                                           threshold_mode="abs", cooldown=2, min_lr=0.005))):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=base_lr)
        sched = make(opt)
        lrs = []
        for m in metrics:
            opt.step()
            sched.step(m)
            lrs.append(opt.param_groups[0]["lr"])
        plateaus.append({**spec, "metrics": metrics, "lr": lrs})
    # OneCycleLR: the lr (and momentum, or Adam's beta1) at steps 0..total_steps (the last one allowed).
    one_cycle = []
    for spec, make_opt, make in (
            ({"name": "one_cycle_sgd", "torch": "OneCycleLR(max_lr=1.0, total_steps=30)", "optimizer": "SGD",
              "max_lr": 1.0, "total_steps": 30},
             lambda ps: torch.optim.SGD(ps, lr=base_lr, momentum=0.9), lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=30)),
            ({"name": "one_cycle_adam_three_phase_linear",
              "torch": "OneCycleLR(max_lr=0.01, total_steps=25, pct_start=0.25, anneal_strategy='linear', "
                       "base_momentum=0.8, max_momentum=0.9, div_factor=10, final_div_factor=100, three_phase=True)",
              "optimizer": "Adam", "max_lr": 0.01, "total_steps": 25, "pct_start": 0.25, "anneal_strategy": "linear",
              "base_momentum": 0.8, "max_momentum": 0.9, "div_factor": 10.0, "final_div_factor": 100.0,
              "three_phase": True},
             lambda ps: torch.optim.Adam(ps, lr=base_lr),
             lambda o: S.OneCycleLR(o, max_lr=0.01, total_steps=25, pct_start=0.25, anneal_strategy="linear",
                                    base_momentum=0.8, max_momentum=0.9, div_factor=10, final_div_factor=100,
                                    three_phase=True)),
            ({"name": "one_cycle_no_momentum", "torch": "OneCycleLR(max_lr=0.5, total_steps=17, pct_start=0.4, "
                                                        "cycle_momentum=False)",
              "optimizer": "SGD", "max_lr": 0.5, "total_steps": 17, "pct_start": 0.4, "cycle_momentum": False},
             lambda ps: torch.optim.SGD(ps, lr=base_lr),
             lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=17, pct_start=0.4, cycle_momentum=False))):
        one_cycle.append({**spec, **cycled(make_opt, make, spec["total_steps"])})
    # CyclicLR: the lr and momentum at steps 0..steps (torch 1.13 cycles only a `momentum`: SGD's).
    cyclic = []
    for spec, make_opt, make in (
            ({"name": "cyclic_triangular", "torch": "CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=4, "
                                                    "step_size_down=2)",
              "base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4, "step_size_down": 2, "steps": 20},
             lambda ps: torch.optim.SGD(ps, lr=base_lr, momentum=0.9),
             lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4, step_size_down=2)),
            ({"name": "cyclic_triangular2", "torch": "CyclicLR(base_lr=0.001, max_lr=0.01, step_size_up=3, "
                                                     "mode='triangular2', base_momentum=0.85, max_momentum=0.95)",
              "base_lr": 0.001, "max_lr": 0.01, "step_size_up": 3, "mode": "triangular2", "base_momentum": 0.85,
              "max_momentum": 0.95, "steps": 25},
             lambda ps: torch.optim.SGD(ps, lr=base_lr, momentum=0.9),
             lambda o: S.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=3, mode="triangular2",
                                  base_momentum=0.85, max_momentum=0.95)),
            ({"name": "cyclic_exp_range", "torch": "CyclicLR(base_lr=0.01, max_lr=0.05, step_size_up=5, "
                                                   "mode='exp_range', gamma=0.95)",
              "base_lr": 0.01, "max_lr": 0.05, "step_size_up": 5, "mode": "exp_range", "gamma": 0.95, "steps": 30},
             lambda ps: torch.optim.SGD(ps, lr=base_lr, momentum=0.9),
             lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.05, step_size_up=5, mode="exp_range", gamma=0.95)),
            ({"name": "cyclic_scale_fn_iterations",
              "torch": "CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 1 / (1 + x), "
                       "scale_mode='iterations', cycle_momentum=False)",
              "base_lr": 0.01, "max_lr": 0.1, "step_size_up": 2, "scale_fn": "1 / (1 + x)",
              "scale_mode": "iterations", "cycle_momentum": False, "steps": 12},
             lambda ps: torch.optim.SGD(ps, lr=base_lr),
             lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 1 / (1 + x),
                                  scale_mode="iterations", cycle_momentum=False)),
            ({"name": "cyclic_sawtooth", "torch": "CyclicLR(base_lr=0.02, max_lr=0.2, step_size_up=3, "
                                                  "step_size_down=0)",
              "base_lr": 0.02, "max_lr": 0.2, "step_size_up": 3, "step_size_down": 0, "steps": 10},
             lambda ps: torch.optim.SGD(ps, lr=base_lr, momentum=0.9),
             lambda o: S.CyclicLR(o, base_lr=0.02, max_lr=0.2, step_size_up=3, step_size_down=0))):
        cyclic.append({**spec, **cycled(make_opt, make, spec["steps"])})
    # CosineAnnealingWarmRestarts stepped at fractional epochs (torch's documented per-batch use,
    # step(epoch + i / iters)), then on without an epoch from a fractional one, then back to an earlier
    # epoch: the lr and last_epoch after each call (null: step()).
    fractional = []
    for spec, make in (
            ({"name": "warm_restarts_fractional", "torch": "CosineAnnealingWarmRestarts(T_0=3, T_mult=2, eta_min=1e-3)",
              "T_0": 3, "T_mult": 2, "eta_min": 1e-3},
             lambda o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=1e-3)),
            ({"name": "warm_restarts_fractional_fixed", "torch": "CosineAnnealingWarmRestarts(T_0=2)",
              "T_0": 2, "T_mult": 1, "eta_min": 0.0},
             lambda o: S.CosineAnnealingWarmRestarts(o, T_0=2))):
        calls = [epoch + i / 4 for epoch in range(10) for i in range(4)] + [2.75, None, None, None, 8.5, None, 0.5, 4]
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=base_lr)
        sched = make(opt)
        lrs, last_epochs = [opt.param_groups[0]["lr"]], [sched.last_epoch]
        for c in calls:
            opt.step()
            sched.step() if c is None else sched.step(c)
            lrs.append(opt.param_groups[0]["lr"])
            last_epochs.append(sched.last_epoch)
        fractional.append({**spec, "calls": calls, "lr": lrs, "last_epoch": last_epochs})
    return {"torch_version": torch.__version__, "base_lr": base_lr, "epochs": epochs, "schedules": schedules,
            "plateaus": plateaus, "one_cycle": one_cycle, "cyclic": cyclic, "warm_restarts_fractional": fractional}


def clip_fixture():
    torch.manual_seed(SEED + 1)
    parts = [[5, 6], [20], [3, 3]]
    grads = [torch.randn(*s) * 0.7 for s in parts]
    cases = []
    # Orders below 1 too: the smallest |g| (-inf) and p = -2 (the norm of all elements, as for p > 0).
    for max_norm, norm_type in [(1.0, 2.0), (100.0, 2.0), (0.5, math.inf), (2.0, 1.0), (1.5, 3.0),
                                (1e-3, -math.inf), (1.0, -math.inf), (1e-3, -2.0)]:
        params = [torch.nn.Parameter(torch.zeros(*s)) for s in parts]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        clipped = torch.cat([p.grad.reshape(-1) for p in params])
        name = norm_type if not math.isinf(norm_type) else "inf" if norm_type > 0 else "-inf"
        cases.append({"max_norm": max_norm, "norm_type": name,
                      "total_norm": f32([total.item()])[0], "clipped": tensor(clipped)})
    return {"torch_version": torch.__version__, "parts": parts,
            "grad": tensor(torch.cat([g.reshape(-1) for g in grads])), "cases": cases,
            "order_zero": clip_order_zero_fixture(grads)}


def clip_coefficient_fixture():
    """clip_grad_norm_'s coefficient to the bit: gradients [a, b] of Pythagorean triples (a, b, c), whose
    2-norm c every summation order gets exactly, so the clipped values differ only by how the coefficient
    is rounded (torch: reciprocal(c + 1e-6) * max_norm, Tensor.__rtruediv__; max_norm / (c + 1e-6)
    rounds differently in the cases marked)."""
    cases = []
    for a, b, c in [(3, 4, 5), (6, 8, 10), (5, 12, 13), (20, 21, 29), (16, 30, 34), (12, 35, 37), (9, 40, 41)]:
        for max_norm in [0.3, 0.7, 0.9, 1.3]:
            p = torch.nn.Parameter(torch.zeros(2))
            p.grad = torch.tensor([float(a), float(b)])
            torch.nn.utils.clip_grad_norm_([p], max_norm)
            t = torch.tensor(float(c))
            divided = torch.tensor(max_norm, dtype=torch.float32) / (t + 1e-6)
            cases.append({"grad": [a, b], "max_norm": max_norm, "clipped": tensor(p.grad),
                          "division_differs": bool(divided.item() != ((1 / (t + 1e-6)) * max_norm).item())})
    return {"torch_version": torch.__version__, "cases": cases}


def clip_order_zero_fixture(grads):
    """norm_type 0: torch counts each parameter's nonzero elements, then the parameters with any (so
    one parameter, kiln's gradient tensor, gives 0 or 1), and a model's four (one of them all zero)."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat[[0, 7, 21, 40, 58]] = 0.0
    single = []
    for max_norm in [100.0, 10.0]:
        p = torch.nn.Parameter(torch.zeros_like(flat))
        p.grad = flat.clone()
        total = torch.nn.utils.clip_grad_norm_([p], max_norm, 0.0)
        single.append({"max_norm": max_norm, "total_norm": f32([total.item()])[0], "clipped": tensor(p.grad)})
    with torch.random.fork_rng():  # the fixtures written after this one draw what they drew before
        torch.manual_seed(SEED + 2)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4))
        model_grads = {k: torch.randn(*p.shape) for k, p in model.named_parameters()}
    model_grads["2.bias"].zero_()
    model_cases = []
    for max_norm, norm_type in [(2.0, 0.0), (10.0, 0.0), (1.0, 2.0)]:
        for k, p in model.named_parameters():
            p.grad = model_grads[k].clone()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type)
        model_cases.append({"max_norm": max_norm, "norm_type": norm_type, "total_norm": f32([total.item()])[0],
                            "clipped": {k: tensor(p.grad) for k, p in model.named_parameters()}})
    # Layer 0 frozen (requires_grad False: its .grad stays None and clip_grad_norm_ leaves it out): the
    # -inf norm is the trainable gradients' smallest |g|, not a frozen zero.
    frozen_grad = {k: torch.linspace(0.3, 1.1, g.numel()).reshape(g.shape) if k == "2.bias" else g
                   for k, g in model_grads.items() if not k.startswith("0.")}  # (2.bias: no zero here)
    frozen_cases = []
    for max_norm, norm_type, clip_value in [(1.0, -math.inf, None), (1.0, -2.0, None), (1.0, 2.0, None),
                                            (10.0, 0.0, None), (None, None, -0.5)]:
        for k, p in model.named_parameters():
            p.grad = frozen_grad[k].clone() if k in frozen_grad else None
        case = {}
        if clip_value is None:
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type)
            case = {"max_norm": max_norm, "norm_type": norm_type if not math.isinf(norm_type) else "-inf",
                    "total_norm": f32([total.item()])[0]}
        else:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip_value)
            case = {"clip_value": clip_value}
        case["clipped"] = {k: tensor(p.grad) for k, p in model.named_parameters() if p.grad is not None}
        frozen_cases.append(case)
    return {"grad": tensor(flat), "single": single,
            "model": {"torch": "Sequential(Linear(6, 5), ReLU(), Linear(5, 4))",
                      "grad": {k: tensor(g) for k, g in model_grads.items()}, "cases": model_cases,
                      "frozen_layer_0": {"grad": {k: tensor(g) for k, g in frozen_grad.items()},
                                         "cases": frozen_cases}}}


def layer_case(name, make_module, shape, seed, scale=1.0):
    """A one-layer Sequential's forward and backward on a random input (normal, times `scale`) and a
    random dL/dy; the module is built after manual_seed(seed), so each case depends on its seed alone."""
    torch.manual_seed(seed)
    module = make_module()
    net = torch.nn.Sequential(module)
    net.eval()
    if scale == 1.0:
        x = torch.randn(*shape, requires_grad=True)
    else:
        x = (torch.randn(*shape) * scale).requires_grad_()
    y = net(x)
    dy = torch.randn(*y.shape)
    y.backward(dy)
    return {"name": name, "torch": repr(module),
            "state_dict": {k: tensor(v) for k, v in net.state_dict().items()},
            "input": tensor(x), "grad_output": tensor(dy), "output": tensor(y), "grad_input": tensor(x.grad),
            "grad": {k: tensor(p.grad) for k, p in net.named_parameters()}}


def affine_drawn(module):
    """module with its elementwise weight drawn from U(0.5, 1.5) and bias from N(0, 1) (not 1 and 0, so
    that a test sees where each goes)."""
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
        module.bias.normal_()
    return module


def layers_fixture():
    nn = torch.nn
    cases = [
        layer_case("linear", lambda: nn.Linear(5, 4), (3, 5), 11),
        layer_case("linear_no_bias", lambda: nn.Linear(5, 4, bias=False), (3, 5), 12),
        layer_case("conv2d", lambda: nn.Conv2d(2, 3, 5), (2, 2, 9, 9), 13),
        layer_case("conv2d_stride_padding", lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), (2, 3, 7, 7), 14),
        layer_case("max_pool2d", lambda: nn.MaxPool2d(2), (2, 3, 6, 6), 15),
        layer_case("avg_pool2d", lambda: nn.AvgPool2d(2), (2, 3, 6, 6), 16),
        layer_case("relu", lambda: nn.ReLU(), (4, 6), 17),
        layer_case("sigmoid", lambda: nn.Sigmoid(), (4, 6), 18),
        layer_case("tanh", lambda: nn.Tanh(), (4, 6), 19),
        layer_case("gelu", lambda: nn.GELU(), (4, 6), 20),
        layer_case("softmax", lambda: nn.Softmax(dim=1), (4, 6), 21),
        layer_case("log_softmax", lambda: nn.LogSoftmax(dim=1), (4, 6), 22),
        layer_case("flatten", lambda: nn.Flatten(), (2, 3, 2, 2), 23),
        layer_case("dropout_eval", lambda: nn.Dropout(0.5), (4, 6), 24),
        layer_case("silu", lambda: nn.SiLU(), (4, 6), 25),
        layer_case("leaky_relu", lambda: nn.LeakyReLU(), (4, 6), 26),
        layer_case("leaky_relu_0.2", lambda: nn.LeakyReLU(0.2), (4, 6), 27),
        layer_case("elu", lambda: nn.ELU(), (4, 6), 28),
        layer_case("elu_0.5", lambda: nn.ELU(alpha=0.5), (4, 6), 29),
        layer_case("layer_norm", lambda: affine_drawn(nn.LayerNorm(6)), (4, 6), 30),
        layer_case("layer_norm_last_of_three", lambda: affine_drawn(nn.LayerNorm(5)), (2, 3, 5), 31),
        layer_case("layer_norm_chw", lambda: affine_drawn(nn.LayerNorm([3, 4, 4], eps=1e-3)), (2, 3, 4, 4), 32),
        layer_case("layer_norm_no_affine", lambda: nn.LayerNorm(6, elementwise_affine=False), (4, 6), 33),
        layer_case("group_norm", lambda: affine_drawn(nn.GroupNorm(2, 6)), (3, 6, 4, 4), 34),
        layer_case("group_norm_features", lambda: affine_drawn(nn.GroupNorm(2, 8)), (4, 8), 35),
        layer_case("group_norm_length", lambda: affine_drawn(nn.GroupNorm(2, 4, eps=1e-3)), (2, 4, 5), 36),
        layer_case("group_norm_one_group", lambda: affine_drawn(nn.GroupNorm(1, 4)), (2, 4, 3, 3), 37),
        layer_case("group_norm_per_channel", lambda: affine_drawn(nn.GroupNorm(4, 4)), (2, 4, 3, 3), 38),
        layer_case("group_norm_no_affine", lambda: nn.GroupNorm(2, 4, affine=False), (2, 4, 3, 3), 39),
        layer_case("conv2d_no_bias", lambda: nn.Conv2d(2, 3, 3, stride=2, padding=1, bias=False), (2, 2, 7, 7), 40),
        layer_case("max_pool2d_padded", lambda: nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 7, 7), 41),
        layer_case("avg_pool2d_padded", lambda: nn.AvgPool2d(3, stride=2, padding=1), (2, 3, 7, 7), 42),
        layer_case("adaptive_avg_pool2d_global", lambda: nn.AdaptiveAvgPool2d(1), (2, 3, 5, 6), 43),
        layer_case("adaptive_avg_pool2d_overlapping", lambda: nn.AdaptiveAvgPool2d((3, 2)), (2, 2, 7, 5), 44),
        layer_case("adaptive_avg_pool2d_upsampling", lambda: nn.AdaptiveAvgPool2d(4), (2, 2, 3, 3), 45),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_strided_fixture():
    """Strides larger than the kernel. A file of its own: rewriting layers.json with another torch build
    would change the last bits of its other values."""
    nn = torch.nn
    cases = [
        layer_case("conv2d_k2_s3", lambda: nn.Conv2d(2, 3, 2, stride=3), (2, 2, 7, 8), 101),
        layer_case("conv2d_k2_s3_p1", lambda: nn.Conv2d(2, 3, 2, stride=3, padding=1), (2, 2, 7, 8), 102),
        layer_case("conv2d_k1_s2", lambda: nn.Conv2d(2, 3, 1, stride=2), (2, 2, 7, 8), 103),
        layer_case("conv2d_k1_s2_p1", lambda: nn.Conv2d(2, 3, 1, stride=2, padding=1), (2, 2, 7, 8), 104),
        layer_case("max_pool2d_k2_s3", lambda: nn.MaxPool2d(2, stride=3), (2, 3, 7, 8), 105),
        layer_case("max_pool2d_k2_s3_p1", lambda: nn.MaxPool2d(2, stride=3, padding=1), (2, 3, 7, 8), 106),
        layer_case("avg_pool2d_k2_s3", lambda: nn.AvgPool2d(2, stride=3), (2, 3, 7, 8), 107),
        layer_case("avg_pool2d_k2_s3_p1", lambda: nn.AvgPool2d(2, stride=3, padding=1), (2, 3, 7, 8), 108),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_conv_modes_fixture():
    """Conv2d's dilation and groups (depthwise among them), with stride, padding and without a bias."""
    nn = torch.nn
    cases = [
        layer_case("conv2d_dilation2", lambda: nn.Conv2d(3, 4, 3, padding=2, dilation=2), (2, 3, 9, 7), 301),
        layer_case("conv2d_dilation3_s2", lambda: nn.Conv2d(2, 3, 3, stride=2, dilation=3), (2, 2, 11, 9), 302),
        layer_case("conv2d_groups2", lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2), (2, 4, 7, 6), 303),
        layer_case("conv2d_depthwise", lambda: nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6), (2, 6, 8, 7), 304),
        layer_case("conv2d_depthwise_multiplier",
                   lambda: nn.Conv2d(3, 6, 3, padding=1, groups=3, bias=False), (2, 3, 6, 5), 305),
        layer_case("conv2d_dilation2_groups2_s2",
                   lambda: nn.Conv2d(4, 8, 2, stride=2, padding=1, dilation=2, groups=2), (2, 4, 9, 8), 306),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_padding_fixture():
    """The padding layers (asymmetric, reflect and circular at their largest, replicate past the input) and
    Conv2d's padding modes."""
    nn = torch.nn

    class CircularPad2d(nn.Module):
        """torch 2.1's nn.CircularPad2d, which torch 1.13 lacks: F.pad(x, padding, mode='circular')."""

        def __init__(self, padding):
            super().__init__()
            self.padding = padding

        def forward(self, x):
            return torch.nn.functional.pad(x, self.padding, mode="circular")

        def extra_repr(self):
            return str(self.padding)

    shape = (2, 3, 5, 6)
    cases = [
        layer_case("zero_pad2d", lambda: nn.ZeroPad2d((1, 2, 0, 3)), shape, 401),
        layer_case("constant_pad2d", lambda: nn.ConstantPad2d(2, 3.5), shape, 402),
        layer_case("reflection_pad2d", lambda: nn.ReflectionPad2d((1, 3, 4, 0)), shape, 403),
        layer_case("replication_pad2d", lambda: nn.ReplicationPad2d((2, 7, 1, 0)), shape, 404),
        layer_case("circular_pad2d", lambda: CircularPad2d((1, 6, 2, 5)), shape, 405),
        layer_case("conv2d_reflect", lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), shape, 406),
        layer_case("conv2d_replicate_s2_d2",
                   lambda: nn.Conv2d(3, 4, 3, stride=2, padding=2, dilation=2, padding_mode="replicate"), shape, 407),
        layer_case("conv2d_circular_groups",
                   lambda: nn.Conv2d(3, 6, 3, padding="same", groups=3, bias=False, padding_mode="circular"),
                   shape, 408),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_upsample_fixture():
    """Upsample in nearest (also as UpsamplingNearest2d), bilinear (align_corners False, and True also as
    UpsamplingBilinear2d) and bicubic mode (align_corners False and True), and Identity."""
    nn = torch.nn
    cases = [
        layer_case("upsample_nearest2", lambda: nn.Upsample(scale_factor=2), (2, 3, 4, 5), 501),
        layer_case("upsampling_nearest2d3", lambda: nn.UpsamplingNearest2d(scale_factor=3), (2, 3, 3, 4), 502),
        layer_case("upsample_bilinear2", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (2, 3, 4, 5), 503),
        layer_case("upsample_bilinear3", lambda: nn.Upsample(scale_factor=3, mode="bilinear"), (2, 2, 5, 3), 504),
        layer_case("identity", lambda: nn.Identity(), (2, 3, 2, 2), 505),
        layer_case("upsample_bilinear2_align_corners",
                   lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), (2, 3, 4, 5), 506),
        layer_case("upsampling_bilinear2d3", lambda: nn.UpsamplingBilinear2d(scale_factor=3), (2, 2, 2, 3), 507),
        layer_case("upsample_bicubic2", lambda: nn.Upsample(scale_factor=2, mode="bicubic"), (2, 3, 4, 5), 508),
        layer_case("upsample_bicubic3", lambda: nn.Upsample(scale_factor=3, mode="bicubic"), (2, 2, 5, 3), 509),
        layer_case("upsample_bicubic2_align_corners",
                   lambda: nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True), (2, 3, 4, 5), 510),
        layer_case("upsample_bicubic3_align_corners",
                   lambda: nn.Upsample(scale_factor=3, mode="bicubic", align_corners=True), (2, 2, 3, 2), 511),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_activations_fixture():
    """The activations added after the first ones: ReLU6, Hardtanh (default and (-2.0, 1.5)), Hardsigmoid,
    Hardswish, Softplus (default and beta 2, threshold 5), Mish, SELU, CELU (1.0 and 0.5), Softsign,
    LogSigmoid, on inputs N(0, 16) that reach their bends at -3, 3 and 6 and Softplus's threshold."""
    nn = torch.nn
    shape = (4, 8)
    cases = [
        layer_case("relu6", lambda: nn.ReLU6(), shape, 801, 4.0),
        layer_case("hardtanh", lambda: nn.Hardtanh(), shape, 802, 4.0),
        layer_case("hardtanh_-2_1.5", lambda: nn.Hardtanh(-2.0, 1.5), shape, 803, 4.0),
        layer_case("hardsigmoid", lambda: nn.Hardsigmoid(), shape, 804, 4.0),
        layer_case("hardswish", lambda: nn.Hardswish(), shape, 805, 4.0),
        layer_case("softplus", lambda: nn.Softplus(), shape, 806, 4.0),
        layer_case("softplus_2_5", lambda: nn.Softplus(beta=2, threshold=5), shape, 807, 4.0),
        layer_case("mish", lambda: nn.Mish(), shape, 808, 4.0),
        layer_case("selu", lambda: nn.SELU(), shape, 809, 4.0),
        layer_case("celu", lambda: nn.CELU(), shape, 810, 4.0),
        layer_case("celu_0.5", lambda: nn.CELU(0.5), shape, 811, 4.0),
        layer_case("softsign", lambda: nn.Softsign(), shape, 812, 4.0),
        layer_case("log_sigmoid", lambda: nn.LogSigmoid(), shape, 813, 4.0),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_softmax_dims_fixture():
    """Softmax and LogSoftmax along other dimensions than the features of [N, C]: the channels of
    [N, C, H, W], the last and the middle of three (negative dims), and the batch."""
    nn = torch.nn
    cases = [
        layer_case("softmax_channels", lambda: nn.Softmax(dim=1), (2, 3, 4, 5), 1201, 3.0),
        layer_case("log_softmax_channels", lambda: nn.LogSoftmax(dim=1), (2, 3, 4, 5), 1202, 3.0),
        layer_case("softmax_last_of_three", lambda: nn.Softmax(dim=-1), (2, 3, 5), 1203, 3.0),
        layer_case("log_softmax_middle_of_three", lambda: nn.LogSoftmax(dim=-2), (2, 4, 3), 1204, 3.0),
        layer_case("softmax_batch", lambda: nn.Softmax(dim=0), (3, 4), 1205, 3.0),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def with_weight(module, values):
    """module with its weight set to values (a PReLU's slopes other than its init)."""
    with torch.no_grad():
        module.weight.copy_(torch.tensor(values))
    return module


def layers_sequence_fixture():
    """Linear over the last dimension of inputs of rank 3 and 4 (torch's [N, *, in_features]), and PReLU
    with one slope, a slope per channel of [N, C, H, W] and per feature of [N, F]."""
    nn = torch.nn
    cases = [
        layer_case("linear_sequence", lambda: nn.Linear(6, 4), (2, 5, 6), 1301),
        layer_case("linear_rank4_no_bias", lambda: nn.Linear(6, 3, bias=False), (3, 2, 4, 6), 1302),
        layer_case("prelu", lambda: nn.PReLU(), (4, 5), 1303),
        layer_case("prelu_channels", lambda: with_weight(nn.PReLU(3), [0.1, -0.5, 2.0]), (2, 3, 4, 5), 1304),
        layer_case("prelu_features", lambda: with_weight(nn.PReLU(4), [0.3, 0.0, 1.0, -1.5]), (5, 4), 1305),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_instance_norm_fixture():
    """InstanceNorm2d without and with drawn affine parameters (eps 1e-3), and InstanceNorm1d with them."""
    nn = torch.nn
    cases = [
        layer_case("instance_norm2d", lambda: nn.InstanceNorm2d(3), (2, 3, 4, 5), 901),
        layer_case("instance_norm2d_affine", lambda: affine_drawn(nn.InstanceNorm2d(3, eps=1e-3, affine=True)),
                   (2, 3, 4, 5), 902),
        layer_case("instance_norm1d_affine", lambda: affine_drawn(nn.InstanceNorm1d(4, affine=True)), (3, 4, 6), 903),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_pixel_shuffle_fixture():
    """The layers that move elements: PixelShuffle (factors 2 and 3) and PixelUnshuffle (2); Unflatten of
    the features into an image, and of the last dimension with an inferred size; Flatten of the last two
    dimensions (start_dim=2) and of the middle two (-3, -2)."""
    nn = torch.nn
    cases = [
        layer_case("pixel_shuffle2", lambda: nn.PixelShuffle(2), (2, 8, 3, 4), 1001),
        layer_case("pixel_shuffle3", lambda: nn.PixelShuffle(3), (2, 9, 2, 3), 1002),
        layer_case("pixel_unshuffle2", lambda: nn.PixelUnshuffle(2), (2, 3, 4, 6), 1003),
        layer_case("unflatten", lambda: nn.Unflatten(1, (2, 3, 2)), (4, 12), 1004),
        layer_case("unflatten_last_inferred", lambda: nn.Unflatten(-1, (2, -1)), (2, 3, 8), 1005),
        layer_case("flatten_start2", lambda: nn.Flatten(2), (2, 3, 4, 5), 1006),
        layer_case("flatten_middle", lambda: nn.Flatten(-3, -2), (2, 3, 4, 5), 1007),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


class AddBranches(torch.nn.ModuleList):
    """kiln's Add<Branches...>: every branch on x, their outputs added (branch 0 first)."""

    def forward(self, x):
        return sum(branch(x) for branch in self)


class ConcatBranches(torch.nn.ModuleList):
    """kiln's Concat<Branches...>: every branch on x, their outputs joined along dimension 1."""

    def forward(self, x):
        return torch.cat([branch(x) for branch in self], 1)


def branch_case(name, make_module, shape, seed, train):
    """layer_case for a block of branches, in training mode or not (BatchNorm by the batch's statistics);
    the parameters as the state_dict, and the buffers (running statistics) after the forward apart.

    The float32 weights, input and dL/dy are drawn as in layer_case; the outputs, gradients and buffers are
    computed from them in float64 (exact, up to their rounding to float32). In the ResNet block two
    BatchNorms over 27 values per channel amplify the rounding of the fp32 convolutions: torch's fp32
    result and kiln's lie up to 7.5e-6 from the exact one, on opposite sides for some elements (the GEMMs'
    summation order depends on the CPU's OpenBLAS kernel), so their difference reached the 1e-5 bound on
    some machines. Against the exact values the test measures kiln's own error."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(make_module())
    net.train(train)
    x = torch.randn(*shape)
    exact = copy.deepcopy(net).double()
    x64 = x.double().requires_grad_(True)
    y = exact(x64)
    dy = torch.randn(*y.shape)
    y.backward(dy.double())
    return {"name": name, "train": train,
            "state_dict": {k: tensor(p) for k, p in net.named_parameters()},
            "input": tensor(x), "grad_output": tensor(dy), "output": tensor(y), "grad_input": tensor(x64.grad),
            "grad": {k: tensor(p.grad) for k, p in exact.named_parameters()},
            "buffers": {k: tensor(b) for k, b in exact.named_buffers()}}


def layers_branches_fixture():
    """Add and Concat: a ResNet block that halves the resolution (a strided 1x1 convolution and BatchNorm as
    its shortcut, drawn affine parameters, training mode), x + f(x) over features, an Inception-like block
    (1x1; 1x1 then 3x3; 3x3 max pool then 1x1) and a DenseNet-like join of x and f(x)."""
    nn = torch.nn

    def bn(c):
        return affine_drawn(nn.BatchNorm2d(c))

    cases = [
        branch_case("add_resnet_downsample", lambda: AddBranches([
            nn.Sequential(nn.Conv2d(4, 8, 3, 2, 1, bias=False), bn(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, 1, 1, bias=False), bn(8)),
            nn.Sequential(nn.Conv2d(4, 8, 1, 2, bias=False), bn(8))]), (3, 4, 6, 6), 1101, True),
        branch_case("add_identity_features", lambda: AddBranches([
            nn.Identity(), nn.Sequential(nn.Linear(5, 5), nn.Tanh())]), (4, 5), 1102, False),
        branch_case("concat_inception", lambda: ConcatBranches([
            nn.Conv2d(4, 3, 1),
            nn.Sequential(nn.Conv2d(4, 2, 1), nn.ReLU(), nn.Conv2d(2, 3, 3, padding=1)),
            nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(4, 2, 1))]), (2, 4, 5, 5), 1103, False),
        branch_case("concat_dense_features", lambda: ConcatBranches([
            nn.Identity(), nn.Sequential(nn.Linear(6, 4), nn.Sigmoid())]), (3, 6), 1104, False),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_padding_same_fixture():
    """Conv2d's padding='same' with an even kernel span, where torch pads one more at the bottom and right:
    K 4; K 2 with dilation 3 (span 4); K 2 (span 2) reflect, in groups, without a bias."""
    nn = torch.nn
    shape = (2, 3, 5, 6)
    cases = [
        layer_case("conv2d_same_k4", lambda: nn.Conv2d(3, 4, 4, padding="same"), shape, 701),
        layer_case("conv2d_same_k2_d3", lambda: nn.Conv2d(3, 4, 2, padding="same", dilation=3), shape, 702),
        layer_case("conv2d_same_k2_reflect_groups",
                   lambda: nn.Conv2d(3, 6, 2, padding="same", groups=3, bias=False, padding_mode="reflect"),
                   shape, 703),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_conv_transpose_fixture():
    """ConvTranspose2d: plain, stride with padding and output_padding, the DCGAN block (K 4, stride 2,
    padding 1, no bias), groups, dilation, output_padding reaching the stride (below the dilation), and a
    stride past the kernel."""
    nn = torch.nn
    cases = [
        layer_case("conv_transpose2d", lambda: nn.ConvTranspose2d(2, 3, 3), (2, 2, 4, 5), 601),
        layer_case("conv_transpose2d_s2_p1_op1",
                   lambda: nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), (2, 3, 4, 3), 602),
        layer_case("conv_transpose2d_dcgan", lambda: nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1, bias=False),
                   (2, 4, 3, 3), 603),
        layer_case("conv_transpose2d_groups",
                   lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1, groups=2), (2, 4, 3, 4), 604),
        layer_case("conv_transpose2d_dilation",
                   lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=2, dilation=2), (2, 2, 4, 5), 605),
        layer_case("conv_transpose2d_op_dilation",
                   lambda: nn.ConvTranspose2d(2, 3, 2, output_padding=1, dilation=2), (2, 2, 3, 4), 606),
        layer_case("conv_transpose2d_k2_s3", lambda: nn.ConvTranspose2d(3, 2, 2, stride=3, padding=1),
                   (2, 3, 4, 3), 607),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def layers_pool_modes_fixture():
    """MaxPool2d and AvgPool2d's ceil_mode, AvgPool2d's count_include_pad=False and divisor_override,
    AdaptiveMaxPool2d."""
    nn = torch.nn
    cases = [
        layer_case("max_pool2d_ceil", lambda: nn.MaxPool2d(2, ceil_mode=True), (2, 3, 5, 7), 201),
        layer_case("avg_pool2d_ceil", lambda: nn.AvgPool2d(2, ceil_mode=True), (2, 3, 5, 7), 202),
        layer_case("max_pool2d_ceil_k2_s2_p1", lambda: nn.MaxPool2d(2, 2, 1, ceil_mode=True), (2, 3, 5, 6), 203),
        layer_case("avg_pool2d_ceil_k2_s2_p1", lambda: nn.AvgPool2d(2, 2, 1, ceil_mode=True), (2, 3, 5, 6), 204),
        layer_case("max_pool2d_ceil_k3_s3_p1", lambda: nn.MaxPool2d(3, 3, 1, ceil_mode=True), (2, 3, 5, 6), 205),
        layer_case("avg_pool2d_ceil_k3_s3_p1", lambda: nn.AvgPool2d(3, 3, 1, ceil_mode=True), (2, 3, 5, 6), 206),
        layer_case("max_pool2d_ceil_k3_s2_p1", lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True), (2, 3, 8, 7), 207),
        layer_case("avg_pool2d_ceil_k3_s2_p1", lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True), (2, 3, 8, 7), 208),
        layer_case("avg_pool2d_exclude_pad", lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (2, 3, 7, 6),
                   209),
        layer_case("avg_pool2d_ceil_exclude_pad",
                   lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 3, 8, 7), 210),
        layer_case("avg_pool2d_ceil_k3_s3_p1_exclude_pad",
                   lambda: nn.AvgPool2d(3, 3, 1, ceil_mode=True, count_include_pad=False), (2, 3, 5, 6), 211),
        layer_case("avg_pool2d_divisor", lambda: nn.AvgPool2d(2, divisor_override=3), (2, 3, 6, 6), 212),
        layer_case("avg_pool2d_ceil_exclude_pad_divisor",
                   lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False, divisor_override=2),
                   (2, 3, 8, 7), 213),
        layer_case("max_pool2d_dilation2", lambda: nn.MaxPool2d(3, 1, 1, dilation=2), (2, 3, 7, 6), 214),
        layer_case("max_pool2d_dilation3_ceil", lambda: nn.MaxPool2d(2, 2, 0, dilation=3, ceil_mode=True),
                   (2, 3, 8, 9), 215),
        layer_case("max_pool2d_dilation2_s2_p1_ceil",
                   lambda: nn.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True), (2, 3, 9, 8), 216),
        layer_case("adaptive_max_pool2d_global", lambda: nn.AdaptiveMaxPool2d(1), (2, 3, 5, 6), 217),
        layer_case("adaptive_max_pool2d_overlapping", lambda: nn.AdaptiveMaxPool2d((3, 2)), (2, 2, 7, 5), 218),
        layer_case("adaptive_max_pool2d_upsampling", lambda: nn.AdaptiveMaxPool2d(4), (2, 2, 3, 3), 219),
    ]
    return {"torch_version": torch.__version__, "cases": cases}


def batchnorm_case(name, make_module, shape, seed):
    """A one-layer Sequential of a BatchNorm with random weight and bias: three training forwards (the
    last one also backward from a random dL/dy), the state_dict after them, then an evaluation forward
    and backward (running statistics) with fresh gradients."""
    torch.manual_seed(seed)
    module = make_module()
    if module.affine:
        with torch.no_grad():
            module.weight.uniform_(0.5, 1.5)
            module.bias.normal_()
    net = torch.nn.Sequential(module)
    initial = {k: tensor(v) for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    net.train()
    train = []
    for step in range(3):
        x = (torch.randn(*shape) * (1 + step) + step).requires_grad_(True)
        y = net(x)
        train.append({"input": tensor(x), "output": tensor(y)})
    dy = torch.randn(*y.shape)
    y.backward(dy)
    train[-1].update(grad_output=tensor(dy), grad_input=tensor(x.grad),
                     grad={k: tensor(p.grad) for k, p in net.named_parameters()})
    state = net.state_dict()
    after = {k: (int(v) if k.endswith("num_batches_tracked") else tensor(v)) for k, v in state.items()}
    net.eval()
    net.zero_grad()
    x = torch.randn(*shape, requires_grad=True)
    y = net(x)
    dy = torch.randn(*y.shape)
    y.backward(dy)
    evaluation = {"input": tensor(x), "output": tensor(y), "grad_output": tensor(dy), "grad_input": tensor(x.grad),
                  "grad": {k: tensor(p.grad) for k, p in net.named_parameters()}}
    return {"name": name, "torch": repr(module), "state_dict": initial, "train": train, "state_after": after,
            "eval": evaluation}


def batchnorm_model_fixture():
    """A small convolutional network with BatchNorm2d and BatchNorm1d: three SGD (momentum) steps on an
    MSE loss, then its parameters, buffers and an evaluation output."""
    nn = torch.nn
    torch.manual_seed(SEED + 40)
    net = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                        nn.Linear(3 * 5 * 5, 4), nn.BatchNorm1d(4, momentum=None))
    initial = {k: tensor(v) for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(6, 2, 5, 5)
    target = torch.randn(6, 4)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    net.eval()
    with torch.no_grad():
        out = net(x)
    state = net.state_dict()
    return {"state_dict": initial, "input": tensor(x), "target": tensor(target), "losses": f32(losses),
            "state_after": {k: (int(v) if k.endswith("num_batches_tracked") else tensor(v)) for k, v in state.items()},
            "eval_output": tensor(out)}


def batchnorm_fixture():
    nn = torch.nn
    cases = [
        batchnorm_case("batch_norm1d", lambda: nn.BatchNorm1d(4), (5, 4), 50),
        batchnorm_case("batch_norm1d_length", lambda: nn.BatchNorm1d(3), (4, 3, 6), 51),
        batchnorm_case("batch_norm2d", lambda: nn.BatchNorm2d(3), (4, 3, 5, 6), 52),
        batchnorm_case("batch_norm2d_no_affine", lambda: nn.BatchNorm2d(3, affine=False), (2, 3, 4, 4), 53),
        batchnorm_case("batch_norm2d_cumulative", lambda: nn.BatchNorm2d(2, eps=1e-3, momentum=None), (3, 2, 4, 4), 54),
        batchnorm_case("batch_norm2d_untracked", lambda: nn.BatchNorm2d(2, track_running_stats=False), (3, 2, 4, 4),
                       55),
    ]
    return {"torch_version": torch.__version__, "cases": cases, "model": batchnorm_model_fixture()}


def losses_fixture():
    torch.manual_seed(SEED + 2)
    pred = torch.randn(5, 3, requires_grad=True)
    target = torch.randn(5, 3)
    mse_fn = torch.nn.MSELoss()
    mse = mse_fn(pred, target)
    mse.backward()
    logits = torch.randn(6, 10)
    logits[2] *= 40.0  # a row of large logits: the log-softmax must stay finite
    logits.requires_grad_(True)
    labels = torch.tensor([3, 0, 9, 9, 1, 5])
    ce_fn = torch.nn.CrossEntropyLoss()
    ce = ce_fn(logits, labels)
    ce.backward()
    ignoring = torch.randn(6, 10, requires_grad=True)
    ignored_labels = torch.tensor([7, -100, 2, -100, -100, 4])
    ce_ignoring = ce_fn(ignoring, ignored_labels)  # ignore_index=-100
    ce_ignoring.backward()
    pred_sum = pred.detach().clone().requires_grad_(True)
    mse_sum_fn = torch.nn.MSELoss(reduction="sum")
    mse_sum = mse_sum_fn(pred_sum, target)
    mse_sum.backward()
    smoothing_in = torch.randn(6, 10)
    smoothing_in[2] *= 40.0
    smoothing_labels = torch.tensor([3, -100, 9, 0, -100, 5])
    smoothed = {}
    for key, reduction in (("cross_entropy_label_smoothing", "mean"), ("cross_entropy_sum", "sum")):
        logits_s = smoothing_in.clone().requires_grad_(True)
        loss_fn = torch.nn.CrossEntropyLoss(reduction=reduction, label_smoothing=0.1)
        loss_s = loss_fn(logits_s, smoothing_labels)
        loss_s.backward()
        smoothed[key] = {"input": tensor(logits_s), "target": smoothing_labels.tolist(),
                         "options": loss_options(loss_fn), "loss": f32([loss_s.item()])[0],
                         "grad": tensor(logits_s.grad)}
    # reduction='none' (drawn after everything above, so that the other cases keep their values)
    unreduced = {}
    pred_none = pred.detach().clone().requires_grad_(True)
    mse_none_fn = torch.nn.MSELoss(reduction="none")
    mse_none = mse_none_fn(pred_none, target)
    upstream = torch.randn(mse_none.shape)
    mse_none.backward(upstream)
    unreduced["mse_none"] = {"input": tensor(pred_none), "target": tensor(target), "grad_output": tensor(upstream),
                             "options": loss_options(mse_none_fn), "loss": tensor(mse_none),
                             "grad": tensor(pred_none.grad)}
    for key, source, source_labels, eps in (("cross_entropy_none", logits, labels, 0.0),
                                            ("cross_entropy_none_smoothing", smoothing_in, smoothing_labels, 0.1)):
        logits_n = source.detach().clone().requires_grad_(True)
        loss_fn = torch.nn.CrossEntropyLoss(reduction="none", label_smoothing=eps)
        loss_n = loss_fn(logits_n, source_labels)
        upstream = torch.randn(loss_n.shape)
        loss_n.backward(upstream)
        unreduced[key] = {"input": tensor(logits_n), "target": source_labels.tolist(), "grad_output": tensor(upstream),
                          "options": loss_options(loss_fn), "loss": tensor(loss_n), "grad": tensor(logits_n.grad)}
    weight = torch.rand(10) + 0.5
    logits_w = ignoring.detach().clone().requires_grad_(True)
    loss_w_fn = torch.nn.CrossEntropyLoss(weight=weight)
    loss_w = loss_w_fn(logits_w, ignored_labels)
    loss_w.backward()
    unreduced["cross_entropy_weight"] = {"input": tensor(logits_w), "target": ignored_labels.tolist(),
                                         "options": loss_options(loss_w_fn), "weight": f32(weight),
                                         "loss": f32([loss_w.item()])[0], "grad": tensor(logits_w.grad)}
    log_probs = torch.log_softmax(torch.randn(6, 10), dim=1)
    nll_labels = torch.tensor([4, -100, 0, 9, -100, 2])
    for key, reduction in (("nll", "mean"), ("nll_sum", "sum"), ("nll_none", "none")):
        unreduced[key] = loss_case(torch.nn.NLLLoss(reduction=reduction), log_probs, nll_labels, reduction)
    # Class weights as fields (drawn after everything above): mean with smoothing, sum, 'none', NLL.
    class_weight = torch.rand(10) + 0.25
    for key, reduction, eps in (("cross_entropy_weight_smoothing", "mean", 0.1),
                                ("cross_entropy_weight_sum", "sum", 0.1),
                                ("cross_entropy_weight_none", "none", 0.2)):
        ce_w = torch.nn.CrossEntropyLoss(weight=class_weight, reduction=reduction, label_smoothing=eps)
        unreduced[key] = loss_case(ce_w, smoothing_in, smoothing_labels, reduction, weight=f32(class_weight))
    for key, reduction in (("nll_weight", "mean"), ("nll_weight_none", "none")):
        nll_w = torch.nn.NLLLoss(weight=class_weight, reduction=reduction)
        unreduced[key] = loss_case(nll_w, log_probs, nll_labels, reduction, weight=f32(class_weight))
    # Probability targets (drawn after everything above): rows of softmax, one one-hot row, one that does
    # not sum to 1 (torch does not check); mean, mean weighted and smoothed, sum smoothed, 'none' weighted.
    soft = torch.softmax(torch.randn(6, 10) * 2.0, dim=1)
    soft[3] = torch.nn.functional.one_hot(torch.tensor(7), 10).float()
    soft[4] = torch.rand(10)
    for key, reduction, eps, w in (("cross_entropy_probs", "mean", 0.0, None),
                                   ("cross_entropy_probs_weight_smoothing", "mean", 0.1, class_weight),
                                   ("cross_entropy_probs_sum", "sum", 0.1, None),
                                   ("cross_entropy_probs_none", "none", 0.2, class_weight)):
        ce_p = torch.nn.CrossEntropyLoss(weight=w, reduction=reduction, label_smoothing=eps)
        extra = {"weight": f32(w)} if w is not None else {}
        unreduced[key] = loss_case(ce_p, smoothing_in, soft, reduction, **extra)
    return {"torch_version": torch.__version__,
            "mse_sum": {"input": tensor(pred_sum), "target": tensor(target), "options": loss_options(mse_sum_fn),
                        "loss": f32([mse_sum.item()])[0], "grad": tensor(pred_sum.grad)},
            **smoothed,
            "mse": {"input": tensor(pred), "target": tensor(target), "options": loss_options(mse_fn),
                    "loss": f32([mse.item()])[0], "grad": tensor(pred.grad)},
            "cross_entropy": {"input": tensor(logits), "target": labels.tolist(), "options": loss_options(ce_fn),
                              "loss": f32([ce.item()])[0], "grad": tensor(logits.grad)},
            "cross_entropy_ignore_index": {"input": tensor(ignoring), "target": ignored_labels.tolist(),
                                           "options": loss_options(ce_fn), "loss": f32([ce_ignoring.item()])[0],
                                           "grad": tensor(ignoring.grad)},
            **unreduced}


def elementwise_losses_fixture():
    torch.manual_seed(SEED + 7)
    pred = torch.randn(6, 3) * 2.0
    target = torch.randn(6, 3)
    target[0, 0] = pred[0, 0]  # an exact 0 difference: L1's gradient there is 0
    logits = torch.randn(6, 3) * 3.0
    logits[1, 2], logits[4, 0] = 40.0, -40.0  # saturated logits stay finite
    probs = torch.rand(6, 3)
    probs[2] = torch.tensor([0.0, 1.0, 1.0])
    pos_weight = torch.rand(3) * 3.0 + 0.5
    cases = {}
    for key, make, source, goal in (
            ("l1", lambda r: torch.nn.L1Loss(reduction=r), pred, target),
            ("smooth_l1", lambda r: torch.nn.SmoothL1Loss(reduction=r), pred, target),
            ("smooth_l1_beta_half", lambda r: torch.nn.SmoothL1Loss(reduction=r, beta=0.5), pred, target),
            ("huber", lambda r: torch.nn.HuberLoss(reduction=r), pred, target),
            ("huber_delta_two", lambda r: torch.nn.HuberLoss(reduction=r, delta=2.0), pred, target),
            ("bce_logits", lambda r: torch.nn.BCEWithLogitsLoss(reduction=r), logits, probs),
            ("bce_logits_pos_weight", lambda r: torch.nn.BCEWithLogitsLoss(reduction=r, pos_weight=pos_weight),
             logits, probs)):
        reductions = {"smooth_l1_beta_half": ("sum",), "huber_delta_two": ("sum",),
                      "bce_logits_pos_weight": ("mean", "none")}.get(key, ("mean", "sum", "none"))
        extra = {"pos_weight": f32(pos_weight)} if key == "bce_logits_pos_weight" else {}
        for r in reductions:
            cases[key if r == "mean" else f"{key}_{r}"] = loss_case(make(r), source, goal, r, **extra)
    # BCELoss on probabilities (drawn after everything above): sigmoids of logits inside (0, 1) against the
    # targets above (the ends 0 and 1, where torch clamps the logs, are the unit test's).
    sigmoids = torch.sigmoid(torch.randn(6, 3) * 2.0)
    for r in ("mean", "sum", "none"):
        cases["bce" if r == "mean" else f"bce_{r}"] = loss_case(torch.nn.BCELoss(reduction=r), sigmoids, probs, r)
    # KLDivLoss (drawn after BCELoss): log_softmax rows against softmax rows with one exact 0 (0 log 0 = 0),
    # and against log_softmax rows drawn last (log_target).
    log_probs = torch.log_softmax(torch.randn(6, 3) * 2.0, dim=1)
    teacher = torch.softmax(torch.randn(6, 3), dim=1)
    teacher[3] = torch.tensor([0.0, 0.25, 0.75])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that reduction='mean' is not the divergence
        for r in ("mean", "sum", "batchmean", "none"):
            cases["kl_div" if r == "mean" else f"kl_div_{r}"] = loss_case(torch.nn.KLDivLoss(reduction=r), log_probs,
                                                                         teacher, r)
        log_teacher = torch.log_softmax(torch.randn(6, 3), dim=1)  # e^-inf (t - x) would be NaN, as torch's
        for r in ("batchmean", "none"):
            cases[f"kl_div_log_target_{r}"] = loss_case(torch.nn.KLDivLoss(reduction=r, log_target=True), log_probs,
                                                        log_teacher, r)
    return {"torch_version": torch.__version__, **cases}


def elementwise_pow_fixture():
    torch.manual_seed(SEED + 8)
    special = [-math.inf, -0.0, 0.0, math.inf, math.nan, -1.0, 1.0, 1e20, -1e20, 1e-20, 1e-40, -2.0, 4.0]
    x = torch.cat([torch.randn(500) * 3.0, torch.tensor(special, dtype=torch.float32)])
    bits = lambda t: t.contiguous().view(torch.int32).numpy().astype(np.int64).astype(np.uint32).tolist()
    cases = [{"exponent": e, "bits": bits(torch.pow(x, e))} for e in (2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 0.0, 1.0,
                                                                          1.5, -3.0, 2.5)]
    return {"torch_version": torch.__version__, "input_bits": bits(x), "cases": cases}


def factories_fixture():
    dtypes = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
              "uint8": torch.uint8}
    def values(t):
        return f32(t.numpy()) if t.dtype == torch.float32 else t.tolist()
    arange = [("float32", 0, 1, 0.1), ("float32", -3.7, 11.2, 0.37), ("float32", 1000.0, -1000.0, -3.3),
              ("float32", 0.1, 100, 0.7), ("float64", -1, 1, 1 / 3), ("float64", 0, 5, 1), ("float32", 2, 2, 1),
              ("int64", 0, 2.5, 1), ("int64", -1.5, 1, 1), ("int64", 10, -7, -3), ("int32", 0.5, 3, 1),
              ("int32", -2.5, -0.1, 1), ("uint8", 0, 300, 100), ("int64", 0, 0, 1)]
    linspace = [("float32", 0, 1, 11), ("float32", -3.7, 11.2, 101), ("float32", 1000.0, -1000.0, 77),
                ("float32", 0.1, 100, 1000), ("float32", -1, 1, 3), ("float32", 2, 2, 5), ("float32", 0, 1, 0),
                ("float32", 3, 5, 1), ("float32", 3, 5, 2), ("float64", -1, 1, 8), ("int64", 0, 10, 5),
                ("int32", 0, 1, 7), ("uint8", -1, 7, 3), ("int64", 0.5, 9.7, 4), ("int64", 9, 0, 4)]
    return {"torch_version": torch.__version__,
            "arange": [{"dtype": d, "start": a, "end": b, "step": s,
                        "values": values(torch.arange(a, b, s, dtype=dtypes[d]))} for d, a, b, s in arange],
            "linspace": [{"dtype": d, "start": a, "end": b, "steps": n,
                          "values": values(torch.linspace(a, b, n, dtype=dtypes[d]))} for d, a, b, n in linspace],
            "eye": [{"n": n, "m": m, "values": f32(torch.eye(n, m).numpy())} for n, m in ((3, 3), (2, 4), (4, 1), (0, 2))]}


def elementwise_division_fixture():
    torch.manual_seed(SEED + 9)
    special = [-math.inf, -3.0, -0.0, 0.0, 2.5, math.inf, math.nan, 1e-30, 1e30]
    y = torch.randn(400) * 3.0
    y[::4] = torch.round(y[::4]) + 1.0
    x = torch.cat([torch.randn(400) * 10.0, torch.tensor([a for a in special for _ in special])])
    y = torch.cat([y, torch.tensor([b for _ in special for b in special])])
    bits = lambda t: t.contiguous().view(torch.int32).numpy().astype(np.int64).astype(np.uint32).tolist()
    i = torch.cat([torch.randint(-1000, 1000, (300,)), torch.tensor([-2**63 + 1, 2**63 - 1, 7, -7, 7, -7])])
    j = torch.cat([torch.randint(1, 40, (300,)) * (torch.randint(0, 2, (300,)) * 2 - 1),
                   torch.tensor([-1, -1, 1, 1, -1, -1])])
    return {"torch_version": torch.__version__, "x_bits": bits(x), "y_bits": bits(y),
            "fmod_bits": bits(torch.fmod(x, y)), "remainder_bits": bits(torch.remainder(x, y)),
            "floor_divide_bits": bits(torch.floor_divide(x, y)), "i": i.tolist(), "j": j.tolist(),
            "i_fmod": torch.fmod(i, j).tolist(), "i_remainder": torch.remainder(i, j).tolist(),
            "i_floor_divide": torch.floor_divide(i, j).tolist()}


def losses_k_dim_fixture():
    torch.manual_seed(SEED + 10)
    image = torch.randn(2, 4, 3, 5) * 2.0
    image_labels = torch.randint(0, 4, (2, 3, 5))
    image_labels[0, 1, 2] = image_labels[1, 2, 4] = -100
    sequence = torch.randn(3, 5, 4) * 2.0
    sequence_labels = torch.randint(0, 5, (3, 4))
    sequence_labels[2, 0] = 2  # the ignore_index of one case
    weight4, weight5 = torch.rand(4) + 0.5, torch.rand(5) + 0.5
    probs = torch.softmax(torch.randn(2, 4, 3, 5), dim=1)
    specs = [
        ("image", "CrossEntropyLoss", {}, None, image, image_labels),
        ("image_sum_smoothing", "CrossEntropyLoss", {"reduction": "sum", "label_smoothing": 0.1}, None, image,
         image_labels),
        ("image_weight_smoothing", "CrossEntropyLoss", {"label_smoothing": 0.2}, weight4, image, image_labels),
        ("image_none", "CrossEntropyLoss", {"reduction": "none"}, None, image, image_labels),
        ("sequence_ignore_2_weight", "CrossEntropyLoss", {"ignore_index": 2}, weight5, sequence, sequence_labels),
        ("sequence_none_smoothing", "CrossEntropyLoss", {"reduction": "none", "label_smoothing": 0.1}, None, sequence,
         sequence_labels),
        ("image_probabilities", "CrossEntropyLoss", {"label_smoothing": 0.1}, weight4, image, probs),
        ("image_probabilities_none", "CrossEntropyLoss", {"reduction": "none"}, None, image, probs),
        ("image_nll", "NLLLoss", {}, weight4, torch.log_softmax(image, dim=1), image_labels),
        ("sequence_nll_none", "NLLLoss", {"reduction": "none"}, None, torch.log_softmax(sequence, dim=1),
         sequence_labels),
    ]
    cases = {}
    for name, kind, options, weight, source, target in specs:
        x = source.detach().clone().requires_grad_(True)
        loss_fn = getattr(torch.nn, kind)(weight=weight, **options)
        loss = loss_fn(x, target)
        case = {"loss_class": kind, "options": loss_options(loss_fn), "input": tensor(x)}
        if weight is not None:
            case["weight"] = f32(weight)
        case["target"] = ({"shape": list(target.shape), "values": target.flatten().tolist()}
                          if target.dtype == torch.int64 else tensor(target))
        if loss.dim() == 0:
            loss.backward()
            case["loss"] = f32([loss.item()])[0]
        else:
            upstream = torch.randn(loss.shape)
            loss.backward(upstream)
            case["grad_output"] = tensor(upstream)
            case["loss"] = tensor(loss)
        case["grad"] = tensor(x.grad)
        cases[name] = case
    return {"torch_version": torch.__version__, "cases": cases}


def init_fixture():
    init = torch.nn.init
    names = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
             "sigmoid", "tanh", "relu", "leaky_relu", "selu"]
    gains = [{"nonlinearity": n, "param": None, "gain": init.calculate_gain(n)} for n in names]
    gains += [{"nonlinearity": "leaky_relu", "param": p, "gain": init.calculate_gain("leaky_relu", p)}
              for p in (0.2, 0.0, 5.0 ** 0.5)]
    shapes = [[120, 400], [10, 84], [6, 3, 5, 5], [16, 6, 5, 5], [8, 2, 3, 3], [4, 6, 3, 3]]
    fans = []
    for shape in shapes:
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(torch.empty(*shape))
        fans.append({"shape": shape, "fan_in": fan_in, "fan_out": fan_out})
    return {"torch_version": torch.__version__, "gains": gains, "fans": fans}


def make_lenet():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def lenet_fixture():
    torch.manual_seed(SEED + 3)
    model = make_lenet()
    x = torch.randn(4, 3, 32, 32)
    target = torch.tensor([1, 7, 3, 3])
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    loss_fn = torch.nn.CrossEntropyLoss()
    out = model(x)
    loss = loss_fn(out, target)
    loss.backward()
    configs = [
        ("sgd_momentum", "SGD", dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=1e-4, nesterov=False)),
        # eps 1e-4, not 1e-8: with 1e-8 an element whose gradient is ~1e-8 (half of 7.weight: dead units)
        # still steps by ~lr, so the fp32 rounding of that tiny gradient, not the formula, decides its step
        # (mlp.json checks eps 1e-8)
        ("adam", "Adam", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-4, weight_decay=0.0, amsgrad=False)),
    ]
    optimizers = optimizer_runs(make_lenet, initial, configs, loss_fn, x, target)
    return {"torch_version": torch.__version__, "layers": repr(model),
            "state_dict": {k: tensor(v) for k, v in initial.items()}, "input": tensor(x),
            "target": target.tolist(), "output": tensor(out), "loss": f32([loss.item()])[0],
            "grad": {k: tensor(p.grad) for k, p in model.named_parameters()}, "optimizers": optimizers}


def write(name, data):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {os.path.getsize(path)} bytes")


FIXTURES = {"mlp.json": lambda: mlp_fixture(), "mlp_maximize.json": lambda: mlp_maximize_fixture(),
            "mlp_adagrad.json": lambda: mlp_adagrad_fixture(),
            "mlp_nadam_radam.json": lambda: mlp_nadam_radam_fixture(),
            "mlp_adamax_adadelta.json": lambda: mlp_adamax_adadelta_fixture(),
            "mlp_param_groups.json": lambda: mlp_param_groups_fixture(),
            "mlp_frozen.json": lambda: mlp_frozen_fixture(),
            "mlp_freeze_schedule.json": lambda: mlp_freeze_schedule_fixture(),
            "schedulers.json": lambda: schedulers_fixture(),
            "clip.json": lambda: clip_fixture(), "layers.json": lambda: layers_fixture(),
            "clip_coefficient.json": lambda: clip_coefficient_fixture(),
            "layers_strided.json": lambda: layers_strided_fixture(),
            "layers_pool_modes.json": lambda: layers_pool_modes_fixture(),
            "layers_conv_modes.json": lambda: layers_conv_modes_fixture(),
            "layers_padding.json": lambda: layers_padding_fixture(),
            "layers_upsample.json": lambda: layers_upsample_fixture(),
            "layers_conv_transpose.json": lambda: layers_conv_transpose_fixture(),
            "layers_padding_same.json": lambda: layers_padding_same_fixture(),
            "layers_activations.json": lambda: layers_activations_fixture(),
            "layers_softmax_dims.json": lambda: layers_softmax_dims_fixture(),
            "layers_sequence.json": lambda: layers_sequence_fixture(),
            "layers_instance_norm.json": lambda: layers_instance_norm_fixture(),
            "layers_pixel_shuffle.json": lambda: layers_pixel_shuffle_fixture(),
            "layers_branches.json": lambda: layers_branches_fixture(),
            "losses.json": lambda: losses_fixture(), "lenet.json": lambda: lenet_fixture(),
            "losses_k_dim.json": lambda: losses_k_dim_fixture(),
            "elementwise_losses.json": lambda: elementwise_losses_fixture(),
            "elementwise_pow.json": lambda: elementwise_pow_fixture(),
            "elementwise_division.json": lambda: elementwise_division_fixture(),
            "init.json": lambda: init_fixture(), "factories.json": lambda: factories_fixture(),
            "batchnorm.json": lambda: batchnorm_fixture()}


def main(names):
    """Writes the fixtures named (all of them without arguments): `make_fixtures.py losses.json`
    rewrites one file and leaves the others as they are (torch builds differ in the last bits of some)."""
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        print(f"make_fixtures.py: unknown fixture {', '.join(unknown)}; expected some of {', '.join(FIXTURES)}",
              file=sys.stderr)
        return 2
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # the same summation order every run
    warnings.simplefilter("ignore", UserWarning)
    os.makedirs(OUT, exist_ok=True)
    for name in names or FIXTURES:
        write(name, FIXTURES[name]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
