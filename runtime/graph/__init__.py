"""The graph and its passes: ``ir`` (ONNX graphs as sorted node lists and their
interpreter), ``fold`` (BatchNormalization folded into the Conv before it), ``layout`` (which
grouped convolutions compute channels-last) and ``channels_last`` (NHWC values inside a
traced segment).
"""
