"""Train a tokenizer for any hf_xfmr architecture in one call, with the `tokenizers` library.

| kind / style            | model                | special tokens                                   | template (pair)                      |
|-------------------------|----------------------|--------------------------------------------------|--------------------------------------|
| wordpiece (bert)        | WordPiece, lowercase | [PAD] [UNK] [CLS] [SEP] [MASK]                   | [CLS] A [SEP] B [SEP]                |
| unigram, style=xlnet    | Unigram (Metaspace)  | <pad> <unk> <s> </s> <cls> <sep> <mask> <eod>    | A <sep> B <sep> <cls>, left padding  |
| unigram, style=albert   | Unigram (Metaspace)  | <pad> <unk> [CLS] [SEP] [MASK]                   | [CLS] A [SEP] B [SEP]                |
| unigram, style=t5       | Unigram (Metaspace)  | <pad> </s> <unk>; <extra_id_99>..<extra_id_0> last | A </s> B </s>                      |
| bpe, style=gpt          | byte-level BPE       | <|endoftext|> (bos = eos = unk = pad)             | none                                 |
| bpe, style=roberta      | byte-level BPE       | <s> <pad> </s> <unk> <mask>                      | <s> A </s></s> B </s>                |
| bpe, style=modernbert   | byte-level BPE       | [UNK] [CLS] [SEP] [PAD] [MASK] <|endoftext|>     | [CLS] A [SEP] B [SEP]                |

Each recipe is its family's (`models/<arch>/family.py`, `hf_xfmr.family.TokenizerRecipe`): architecture names are
accepted as `kind` too (bert/distilbert -> wordpiece, xlnet/albert/t5 -> unigram, gpt/roberta/bart/modernbert ->
bpe; DistilBERT shares BERT's recipe and BART RoBERTa's), and a new family brings its own. Token type ids
follow each architecture (XLNet gives its final <cls> segment id 2). The result is a `PreTrainedTokenizerFast`; `save_pretrained` it.

A tokenizer emits (`model_input_names`, kept by `save_pretrained`) what its model takes, decided in one place,
`model_input_names(arch)`: the tokenizer outputs the architecture's base model accepts, `token_type_ids` only
where its recipe marks the second segment. BERT, ALBERT and XLNet tokenizers emit input_ids, token_type_ids
and attention_mask; DistilBERT, RoBERTa, GPT, ModernBERT, T5 and BART ones input_ids and attention_mask.
`fit_tokenizer_to_model(tokenizer, model)` does the same for any tokenizer (a teacher's, one given by path)
before it is saved next to a model.

Command line: `python -m hf_xfmr.data.tokenizers --kind xlnet --vocab-size 8000 --out tok/`.
"""

import argparse
import inspect
import itertools
import warnings

from ..family import TokenizerRecipe, families, get_family, tokenizer_recipe
from .corpus import default_corpus, iter_texts

# The plain kinds take a family's recipe by default; every other recipe belongs to a family (`hf_xfmr.family`).
_DEFAULT_STYLE = {"wordpiece": "bert", "unigram": "xlnet", "bpe": "gpt"}


def _recipes() -> dict[str, TokenizerRecipe]:
    """style -> recipe: the families that define their own (the style is the family's name)."""
    return {f.name: f.tokenizer for f in families() if isinstance(f.tokenizer, TokenizerRecipe)}


def _aliases() -> dict[str, tuple[str, str | None]]:
    """name -> (kind, style): every family name and alias (with its recipe's style), and the plain kinds."""
    recipes = _recipes()
    styles = {f.name: (f.tokenizer if isinstance(f.tokenizer, str) else f.name) for f in families()}
    aliases = {kind: (kind, None) for kind in _DEFAULT_STYLE}
    for family in families():
        style = styles[family.name]
        for name in (family.name, *family.aliases):
            aliases[name] = (recipes[style].kind, style)
    return aliases


def tokenizer_aliases() -> dict[str, tuple[str, str | None]]:
    """Every name `train_tokenizer` accepts as `kind`, mapped to its (kind, default style).

    Architecture names (bert, xlnet, gpt, ...) map to their own recipe; the plain kinds (wordpiece, unigram,
    bpe) map to themselves with no style. A copy: callers may read it to check a name before training.
    """
    return _aliases()


def _resolve(kind: str, style: str | None) -> tuple[str, str]:
    key = kind.lower()
    aliases = _aliases()
    if key not in aliases:
        raise ValueError(f"Unknown tokenizer kind {kind!r}; choose one of {sorted(aliases)}.")
    kind, alias_style = aliases[key]
    style = style or alias_style or _DEFAULT_STYLE[kind]
    fitting = tuple(name for name, recipe in _recipes().items() if recipe.kind == kind)
    if style not in fitting:
        raise ValueError(f"style={style!r} does not fit a {kind} tokenizer; choose one of {fitting}.")
    return kind, style


# What a tokenizer can emit for a model, in the order transformers' tokenizers use.
_TOKENIZER_OUTPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _recipe_architecture(kind: str, style: str | None) -> str | None:
    """The family whose own recipe `train_tokenizer(kind, style=style)` is, else None."""
    key = kind.lower()
    aliases = _aliases()
    if key not in {f.name for f in families()} or style not in (None, aliases[key][1]):
        return None
    return key


def model_input_names(arch) -> list[str]:
    """What a tokenizer for `arch` (an architecture name, a config or an hf_xfmr model) must emit.

    Read from the architecture itself: the tokenizer outputs (`input_ids`, `token_type_ids`,
    `attention_mask`) its base model's `forward` accepts, keeping `token_type_ids` only where its tokenizer
    recipe marks the second segment (BERT, ALBERT, XLNet). DistilBERT, ModernBERT, T5 and BART models do
    not take token types; GPT and RoBERTa models accept them, but their recipes give every token type 0,
    which adds nothing to RoBERTa (one type) and would change GPT's output (GPT-2 adds token types through
    the word embeddings), so their tokenizers do not emit them, as in transformers.
    Raises ValueError for something that is not an hf_xfmr architecture.
    """
    from ..models.registry import get_architecture

    arch = get_architecture(arch)  # (a name, a config or a model)
    main = arch.classes.get("base") or next(iter(arch.classes.values()))
    taken = inspect.signature(main.forward).parameters
    names = [n for n in _TOKENIZER_OUTPUTS if n in taken]
    if not tokenizer_recipe(get_family(arch.name)).marks_segments and "token_type_ids" in names:
        names.remove("token_type_ids")
    return names


def fit_tokenizer_to_model(tokenizer, model):
    """Make `tokenizer` emit exactly what `model` takes, and return it.

    Sets `tokenizer.model_input_names` (which `save_pretrained` keeps) to `model_input_names(model)`, so that,
    e.g., a BERT teacher's tokenizer saved with a DistilBERT student stops emitting `token_type_ids`.
    `model` is an hf_xfmr model or config; any other model leaves the tokenizer as it is.
    """
    try:
        names = model_input_names(model)
    except ValueError:  # not an hf_xfmr architecture: nothing here knows what it takes
        return tokenizer
    tokenizer.model_input_names = names
    # save_pretrained writes only the settings named in init_kwargs; a new dict, as a copy.copy shares the old one.
    tokenizer.init_kwargs = {**tokenizer.init_kwargs, "model_input_names": list(names)}
    return tokenizer


def train_tokenizer(kind: str = "wordpiece", corpus=None, vocab_size: int = 8000, *, style: str | None = None,
                    min_frequency: int = 2, lowercase: bool | None = None, model_max_length: int = 512,
                    max_documents: int | None = None):
    """Train a tokenizer and wrap it as a `PreTrainedTokenizerFast` with its architecture's special tokens.

    kind: "wordpiece" | "unigram" | "bpe", or an architecture name ("bert", "xlnet", "gpt", ...).
    corpus: None for the embedded corpus, a list of documents (strings or paragraph lists), a
        `datasets` corpus with a `text` column (see `load_corpus`) or any iterable of strings.
    style: which special tokens and template (see the module table); defaults from `kind`.
    lowercase: defaults to True for WordPiece (uncased BERT), False otherwise.

    Given an architecture name (with its own style), the tokenizer emits what that architecture's model takes
    (`model_input_names(kind)`: no `token_type_ids` for "distilbert" although it shares BERT's WordPiece).

    The result has `len(tokenizer)` tokens, special tokens included: `vocab_size` at most, fewer when
    the corpus is too small to supply that many (a UserWarning then gives both numbers). Size the
    model's embeddings with `len(tokenizer)`.

    Reproducibility: byte-level BPE training is deterministic, but `tokenizers` (0.23) trains WordPiece
    and Unigram vocabularies that can differ slightly from run to run on the same corpus (hash-map order
    breaks ties; upstream huggingface/tokenizers#1794). Train once and `save_pretrained` the tokenizer
    when runs must be comparable.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    arch = _recipe_architecture(kind, style)
    kind, style = _resolve(kind, style)
    recipe = _recipes()[style]
    specials = list(recipe.special)
    sentinels = recipe.sentinels  # part of vocab_size, added after training
    min_vocab = len(specials) + sentinels + (256 if kind == "bpe" else 30)
    if vocab_size < min_vocab:
        raise ValueError(f"vocab_size={vocab_size} is too small for a {kind} tokenizer; use at least {min_vocab}.")
    if corpus is None:
        corpus = default_corpus(max_documents)
    batches = iter_texts(corpus)
    first = next(batches)  # raises a clear ValueError on an empty corpus
    texts = itertools.chain([first], batches)
    lowercase = (kind == "wordpiece") if lowercase is None else lowercase

    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=specials, show_progress=False)
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
        tok.normalizer = normalizers.Sequence(norm)
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size - sentinels, special_tokens=specials, unk_token="<unk>",
                                          max_piece_length=16, show_progress=False)
    else:
        tok = Tokenizer(models.BPE())
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    sentinel_tokens = [f"<extra_id_{i}>" for i in range(sentinels)]
    if sentinels:  # <extra_id_99> first, so <extra_id_0> gets the last id
        tok.add_special_tokens(sentinel_tokens[::-1])
    trained = tok.get_vocab_size(with_added_tokens=True)
    if trained < vocab_size:
        warnings.warn(
            f"train_tokenizer: asked for vocab_size={vocab_size} but the {kind} trainer found only {trained} tokens "
            f"in this corpus, so the tokenizer has {trained}. Size the model with len(tokenizer) = {trained}, or "
            f"train on a larger corpus to reach {vocab_size}.",
            UserWarning,
            stacklevel=2,
        )

    if recipe.template is not None:
        single, pair = recipe.template
        used = sorted({t.split(":")[0] for t in (single + " " + pair).split() if not t.startswith("$")})
        template = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in used])
        if kind == "bpe":
            tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
        else:
            tok.post_processor = template
    elif kind == "bpe":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    # An architecture's own recipe emits what its model takes; a bare kind/style, token types where they mark segments.
    if arch is not None:
        names = model_input_names(arch)
    else:
        names = [n for n in _TOKENIZER_OUTPUTS if n != "token_type_ids" or recipe.marks_segments]
    roles = dict(recipe.roles)
    if sentinel_tokens:
        roles["additional_special_tokens"] = [*roles.get("additional_special_tokens", ()), *sentinel_tokens]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=model_max_length, model_input_names=names,
        padding_side=recipe.padding_side, **roles)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hf_xfmr.data.tokenizers",
                                     description="Train a tokenizer for an hf_xfmr architecture.")
    parser.add_argument("--kind", default="wordpiece", help=f"one of {sorted(_aliases())}")
    parser.add_argument("--style", default=None, help="special-token style (see module docs)")
    parser.add_argument("--corpus", default=None, help="file/dir/dataset name; default: embedded corpus")
    # Both spellings, as in `hf-xfmr` (--text_column / --text-column).
    parser.add_argument("--text_column", "--text-column", default="text", help="the corpus column holding the text")
    parser.add_argument("--vocab_size", "--vocab-size", type=int, default=8000)
    parser.add_argument("--min_frequency", "--min-frequency", type=int, default=2)
    parser.add_argument("--out", required=True, help="output folder (save_pretrained)")
    args = parser.parse_args(argv)
    from .corpus import load_corpus

    corpus = load_corpus(args.corpus, text_column=args.text_column) if args.corpus else None
    tok = train_tokenizer(args.kind, corpus, args.vocab_size, style=args.style, min_frequency=args.min_frequency)
    tok.save_pretrained(args.out)
    print(f"saved {type(tok).__name__} with {len(tok)} tokens to {args.out}")


if __name__ == "__main__":
    main()
