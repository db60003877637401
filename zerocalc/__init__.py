"""zerocalc: exact, explained training-memory accounting for ZeRO stages 0-3. Standard library only."""

__version__ = "0.1.0"

from .output.report import report_dict  # noqa: E402
from .scenario import FieldError, Scenario  # noqa: E402
from .states.deepspeed_estimator import deepspeed_view  # noqa: E402
from .states.ledger import build_ledger, bytes_per_param  # noqa: E402
from .states.zero import model_states  # noqa: E402
from .units import format_bytes, parse_count  # noqa: E402

__all__ = ["Scenario", "FieldError", "model_states", "build_ledger", "bytes_per_param", "deepspeed_view",
           "report_dict", "format_bytes", "parse_count", "__version__"]
