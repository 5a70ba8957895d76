// The layers of one's own of docs/models.md ("Layers of your own") on the GPU: tests/unit/docs/
// test_custom_layer.cpp compiled by nvcc, whose device cases then run on kiln::Cuda (kiln::test::devices
// is Cuda in a CUDA build): the page's Tanhshrink and Scale<F> against float64 finite differences,
// by hand, accumulating, under NoGrad. The CPU cases run here too.
#include "unit/docs/test_custom_layer.cpp"
