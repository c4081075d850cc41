"""Write the built-in demo dataset: python scripts/make_demo_data.py [folder] (default demo_data)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rnnfleet.synthetic import write_demo_data  # noqa: E402

if __name__ == "__main__":
    for path in write_demo_data(sys.argv[1] if len(sys.argv) > 1 else "demo_data"):
        print(path)
