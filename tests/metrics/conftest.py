import sys
from pathlib import Path

# The shared helpers (hub_server.py, utils.py) live one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
