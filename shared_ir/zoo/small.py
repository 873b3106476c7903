"""Small models of the zoo: an LSTM language model and a 2-layer MLP."""
from __future__ import annotations


def lstm_lm(vocab: int = 10000, emb: int = 650, hidden: int = 650, layers: int = 2, seq: int = 35):
    """Word-level LSTM LM (Zaremba et al. 2014 "medium": 650 units, 35 unrolled steps, 10k vocab as PTB): embedding,
    ``layers`` stacked LSTM layers, linear decoder to the vocabulary. Input: token ids [seq, B] (time-major).
    ``seq`` only documents the default example input; the frontend unrolls the traced length."""
    import torch.nn as nn

    class LSTMLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(vocab, emb)
            self.drop = nn.Dropout(0.5)
            self.rnn = nn.LSTM(emb, hidden, layers, dropout=0.5 if layers > 1 else 0.0)
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, ids):
            out, _ = self.rnn(self.drop(self.encoder(ids)))
            return self.decoder(self.drop(out))

    return LSTMLM()


def mlp2(in_features: int = 784, hidden: int = 1024, out_features: int = 10):
    """Two linear layers with a ReLU between (an MNIST-sized MLP by default). Input: [B, in_features]."""
    import torch.nn as nn

    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_features))
