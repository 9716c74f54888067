"""`briskbert quantize`: the fastest CPU model (fp32, the fused ONNX graph in fp32 or int8, torchao int8) that
agrees with the fp32 model on real text, in a folder whose `quantization.json` and README say what it holds."""
