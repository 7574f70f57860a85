"""Byte-level BPE tokenizer trained on our corpus, digits split one per token (as DeepSeekMath's tokenizer).

Splitting digits means ``1234`` is always ``1 2 3 4``: the model sees every number in the same positional
notation instead of arbitrary multi-digit merges, which is what makes arithmetic learnable at small scale.
The result is a :class:`transformers.PreTrainedTokenizerFast` with the special tokens and chat template of
:mod:`dsmath.modeling.prompts`, saved with ``save_pretrained`` so ``AutoTokenizer.from_pretrained(dir)`` loads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import zip_longest

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dsmath.modeling import prompts


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Digits one by one first, then GPT-2's byte-level split (words, spaces, punctuation)."""
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE on `texts` (any iterable of documents); special tokens take the first ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(prompts.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: no unknown tokens, ever
        show_progress=True,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def to_hf(tok: Tokenizer):
    """Wrap a trained `tokenizers.Tokenizer` as a transformers tokenizer with our special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=prompts.END,
        pad_token=prompts.PAD,
        additional_special_tokens=[prompts.USER, prompts.ASSISTANT],
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = prompts.CHAT_TEMPLATE
    return hf


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int = 2):
    """Train the corpus tokenizer and return it as a `PreTrainedTokenizerFast` ready for `save_pretrained`."""
    return to_hf(train_bpe(texts, vocab_size, min_frequency))


def interleave(corpora: Sequence[Sequence[str]], max_chars: int) -> Iterator[str]:
    """Documents of several corpora taken in turn (code, math, code, ...) until `max_chars` characters."""
    total = 0
    for group in zip_longest(*corpora):
        for text in group:
            if text is None:
                continue
            if total >= max_chars:
                return
            total += len(text)
            yield text


def chars_per_token(tokenizer, texts: Sequence[str]) -> float:
    """Compression of `texts`: characters per token (higher = fewer tokens per document)."""
    n_tokens = sum(len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"])
    return sum(len(t) for t in texts) / max(n_tokens, 1)
