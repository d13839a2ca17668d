"""Whole-dataset operations built on the public API and the stores: downsampling pyramids,
integrity scanning (verify / repair)."""

from .downsample import DownsampleResult, downsample, parse_size, plan_pyramid

__all__ = ["DownsampleResult", "downsample", "parse_size", "plan_pyramid"]
