"""circuitop: continuous-time neural cells (KNC/CKB, NAC, LTC, CfC, PDNA) as torch modules.

Depends only on ``pde_data`` (for the xarray adapter); never on ``evaluation`` or ``operators``.
"""

from circuitop.nac import NeuronalAttentionCircuit, sequence_timestamps
from circuitop.nac_ref import nac_attention_ref
from circuitop.ncp import NCPBackbone, NCPProjection, ncp_wiring

from ._native import NativeKernelWarning, build_native_kernels, kirchhoff_ops as kirchhoff_kernels
from ._native import resample_for as resample_kernels
from .apply import apply
from .ckb import CascadedKirchhoffBlock, CascadedKirchhoffBlock1d, CascadedKirchhoffBlock2d
from .knc import KirchhoffCell, zoh_coefficients, zoh_scan_ref
from .routing import ROUTINGS, ChannelNorm, KirchhoffRouting2d
from .scan import selective_scan, selective_scan_ref
from .cfc import CfC, CfCCell
from .ltc import LTC, LTCCell, ltc_scan, ltc_scan_ref
from .pdna import PDNA
from .sequence import SequenceModel, steps_from_timestamps

__all__ = ["selective_scan", "selective_scan_ref", "KirchhoffCell", "zoh_coefficients", "zoh_scan_ref",
           "CascadedKirchhoffBlock", "CascadedKirchhoffBlock1d", "CascadedKirchhoffBlock2d", "apply",
           "KirchhoffRouting2d", "ROUTINGS", "ChannelNorm",
           "NeuronalAttentionCircuit", "sequence_timestamps", "nac_attention_ref", "NCPBackbone", "NCPProjection",
           "ncp_wiring", "NativeKernelWarning", "build_native_kernels", "kirchhoff_kernels", "resample_kernels",
           "LTCCell", "LTC", "ltc_scan", "ltc_scan_ref", "CfCCell", "CfC", "PDNA", "SequenceModel",
           "steps_from_timestamps"]
