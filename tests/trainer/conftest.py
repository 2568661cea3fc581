import os
import sys

# Shared helpers (tests/utils.py, tests/hub_server.py) live one folder up.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
