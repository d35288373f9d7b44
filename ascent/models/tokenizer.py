"""A real character-level tokenizer for the built-in tiny model.

One token per character of a fixed alphabet (digits, lower-case letters, arithmetic and
punctuation), plus `<pad>`, `<eos>` and `<unk>`. It is a `PreTrainedTokenizerFast` backed by
a `tokenizers` WordLevel model, so it saves, loads and batches exactly like the tokenizer of
a downloaded model: `AutoTokenizer.from_pretrained(dir)` gives it back.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)
ALPHABET = string.digits + string.ascii_lowercase + " +-*/=()<>.,:;?!'_\n"


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """A tokenizer with ids 0-2 for pad/eos/unk and one id per character of `alphabet`."""
    if len(set(alphabet)) != len(alphabet):
        raise ValueError("alphabet has repeated characters")
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *alphabet])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # Every character is its own pre-token ([\s\S] also matches newlines, which "." does not).
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    return tokenizer
