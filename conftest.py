"""Settings shared by the unit tests and the notebooks that nbval executes.

Environment variables set here are inherited by the notebook kernels nbval starts.
"""

import os
from pathlib import Path

# Progress bars are for people; in tests they only add noise to the compared outputs.
os.environ.setdefault("TQDM_DISABLE", "1")
# Figures are rendered off-screen.
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
# In this repository's CI the data files sit beside the project, in ../shared/data.
_shared = Path(__file__).resolve().parent.parent / "shared" / "data"
if "SEQBOOK_DATA" not in os.environ and _shared.is_dir():
    os.environ["SEQBOOK_DATA"] = str(_shared)
