"""Write the tiny word-level Hugging Face tokenizer the peers' clients were run with.

GuideLLM, AIPerf and vLLM's bench each need a tokenizer to build prompts and count tokens;
this host reaches no model hub, so they were given this one (``tokenizer/``): 512 words,
whitespace-split, the truth server's words among them. Run with a Python that has
`tokenizers` (any peer's venv): ``python make_tokenizer.py``.
"""

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

HERE = Path(__file__).resolve().parent / "tokenizer"
SERVER = "tokens are the pieces a model reads and writes one at time"
SERVER_WORDS = SERVER.split(" ")
words = ["[UNK]", "[BOS]", "[EOS]", *dict.fromkeys(SERVER_WORDS)]
words += [f"w{i}" for i in range(512 - len(words))]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
HERE.mkdir(exist_ok=True)
tok.save(str(HERE / "tokenizer.json"))
config = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": "[UNK]",
    "bos_token": "[BOS]",
    "eos_token": "[EOS]",
    "model_max_length": 8192,
}
(HERE / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
(HERE / "special_tokens_map.json").write_text(
    json.dumps({k: config[k] for k in ("unk_token", "bos_token", "eos_token")}) + "\n"
)
