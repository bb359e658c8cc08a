"""Train a small word-level language model, tokenising raw text on the fly in the loop.

Written the way many first language-model scripts are: the corpus is kept as raw documents, a
tokenizer written in Python (normalise, split into words, look each up in the vocabulary) turns
each batch of documents into ids inside the training loop, and a small Transformer predicts the
next word. The designed bottleneck is that tokenisation: the model is small, so most of each
step is the Python tokenizer, and ``gpudoctor why`` should name its line (CPU-bound in the user's
own preprocessing), not the forward pass.

    python language_model.py [--seconds 0] [--steps 0] [--progress]

``--seconds``/``--steps``: stop after that long or that many steps (0: run until killed).
Prints ``ready`` once the loop runs; with ``--progress`` one ``progress T STEP CPU`` line per
step (monotonic time, steps done, the process's CPU seconds) for benchmarks/why_overhead.py.
"""

import random
import re
import unicodedata

import torch
from torch import nn

from _harness import StepClock, parser as harness_parser

WORDS = ("the model learns to predict each next word from the words before it while the loss "
         "falls slowly over many steps of gradient descent on batches of text drawn from a corpus "
         "of short documents about training neural networks data loaders and optimizers").split()


def make_corpus(num_docs=400, words_per_doc=2500, seed=0):
    """Synthetic raw documents: sentences of known words with capitals and punctuation."""
    rng = random.Random(seed)
    docs = []
    for _ in range(num_docs):
        sentences = []
        while sum(len(s.split()) for s in sentences) < words_per_doc:
            words = rng.choices(WORDS, k=rng.randint(6, 16))
            sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ";"]))
        docs.append(" ".join(sentences))
    return docs


class WordTokenizer:
    """Lower-case, Unicode-normalise, split words from punctuation, map to ids (unknown: 1)."""

    pattern = re.compile(r"\w+|[^\w\s]")

    def __init__(self, docs, max_vocab=5000):
        counts = {}
        for doc in docs:
            for word in self.split(doc):
                counts[word] = counts.get(word, 0) + 1
        vocab = sorted(counts, key=lambda w: -counts[w])[: max_vocab - 2]
        self.stoi = {"<pad>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(vocab)}}

    def split(self, text):
        text = unicodedata.normalize("NFKC", text).lower()  # TOKENIZE LINE: normalise
        return self.pattern.findall(text)  # TOKENIZE LINE: split

    def encode(self, text, length):
        ids = [self.stoi.get(word, 1) for word in self.split(text)]  # TOKENIZE LINE
        ids = ids[:length] + [0] * max(0, length - len(ids))
        return ids


class TinyLM(nn.Module):
    def __init__(self, vocab_size, dim=64, context=32):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.position = nn.Parameter(torch.zeros(context, dim))
        layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(dim, vocab_size)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, ids):
        x = self.embed(ids) + self.position[: ids.shape[1]]
        x = self.encoder(x, mask=self.mask[: ids.shape[1], : ids.shape[1]], is_causal=True)
        return self.head(x)


def main():
    parser = harness_parser(__doc__, batch_size=32)
    parser.add_argument("--context", type=int, default=32)
    args = parser.parse_args()

    torch.set_num_threads(1)
    docs = make_corpus()
    tokenizer = WordTokenizer(docs[:50])
    model = TinyLM(len(tokenizer.stoi), context=args.context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss(ignore_index=0)

    model.train()
    clock = StepClock(args)
    while True:
        batch = random.sample(docs, args.batch_size)
        ids = torch.tensor([tokenizer.encode(doc, args.context + 1) for doc in batch])
        inputs, targets = ids[:, :-1], ids[:, 1:]
        logits = model(inputs)
        loss = criterion(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if clock.tick():
            return


if __name__ == "__main__":
    main()
