"""Forecasts from model files: predict's library and command, the ONNX export."""
