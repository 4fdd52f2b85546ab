"""Backbones: the FNO baseline, the SpectralConv host FNO, the U-Net, their CKB/NAC variants and the
1D order-benchmark models, the image classifiers and the sequence models, with an explicit registry."""

from operators.models.chonn import ChonnFNOConfig, ChonnUNetConfig
from operators.models.fno import FNOConfig
from operators.models.hosts import SpectralFNO, SpectralFNOConfig
from operators.models.nac import NACFNOConfig, NACUNetConfig
from operators.models.order_models import CascadeStack, CKBChainConfig, CKBStackConfig, DepthStackConfig
from operators.models.registry import MODELS, DOMAINS, build, make_config
from operators.models.sequence import (AttentionConfig, CfCConfig, CKBSequenceConfig, GRUConfig, LTCConfig,
                                       NACSequenceConfig, PDNAConfig)
from operators.models.unet import UNet, UNetConfig
from operators.models.vision import ConvVisionConfig, VisionConfig, count_flops

__all__ = [
    "MODELS", "DOMAINS", "build", "make_config",
    "FNOConfig", "SpectralFNO", "SpectralFNOConfig", "UNet", "UNetConfig",
    "ChonnFNOConfig", "ChonnUNetConfig", "NACFNOConfig", "NACUNetConfig",
    "CascadeStack", "CKBChainConfig", "DepthStackConfig", "CKBStackConfig",
    "VisionConfig", "ConvVisionConfig", "count_flops",
    "LTCConfig", "CfCConfig", "PDNAConfig", "NACSequenceConfig", "CKBSequenceConfig", "GRUConfig", "AttentionConfig",
]
