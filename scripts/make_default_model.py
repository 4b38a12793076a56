"""Builds the embedded default checkpoint deterministically (a tiny seeded Llama made with
Transformers from a config; nothing is downloaded) into the folder given."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "oracle"))
import tiny_models  # noqa: E402

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out/default-model")
    if not (out / "model.safetensors").exists():
        tiny_models.make("llama", out)
    print(out)
