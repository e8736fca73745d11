"""LSTM sentiment classifier for IMDB, after the Kaggle notebook the HPML slides used (affand20, "IMDB with
PyTorch"): token embedding, a stacked LSTM (Hochreiter & Schmidhuber 1997) and a linear head on the top layer's
hidden state after the last real token.

Differences from that notebook: the head gives ``num_classes`` logits (2 by default, for cross-entropy) instead of
one sigmoid unit, and the sizes are options. The layers stay plain ``nn.Embedding`` / ``nn.LSTM`` / ``nn.Linear``
attributes named ``embedding``, ``lstm`` and ``head`` because the pruning study prunes them by name.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from cnnlab.models.registry import register_model

PAD_INDEX = 0  # token id 0 is padding: its embedding row stays zero


class LSTMSentiment(nn.Module):
    """Token ids (batch, seq_len) -> logits (batch, num_classes), from the top LSTM layer's hidden state at each
    sequence's last real (non-padding) token.

    Without ``lengths`` the LSTM runs over every position and the state is read at the last non-zero token, which
    works for right padding (cnnlab.data) and left padding (the reference notebook) alike; since the LSTM is
    causal, right padding then gives exactly the unpadded result. With ``lengths`` (real tokens per sequence,
    right padding) the sequences are packed, so the LSTM also skips the padding's compute.
    """

    def __init__(
        self,
        num_classes: int = 2,
        vocab_size: int = 20000,
        embed_dim: int = 128,
        hidden_size: int = 256,
        num_layers: int = 2,
        seq_len: int = 256,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.input_shape = (seq_len,)
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_INDEX)
        # nn.LSTM only applies dropout between layers, and warns when asked to with a single layer.
        self.lstm = nn.LSTM(
            embed_dim, hidden_size, num_layers, batch_first=True, dropout=dropout if num_layers > 1 else 0.0
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_size, num_classes)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        embedded = self.embedding(tokens)
        if lengths is not None:
            # pack_padded_sequence wants the lengths on the CPU as int64, whatever the device of the tokens.
            lengths = torch.as_tensor(lengths).to("cpu", torch.int64)
            packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
            _, (hidden, _) = self.lstm(packed)
            return self.head(self.dropout(hidden[-1]))
        output, _ = self.lstm(embedded)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        last = ((tokens != PAD_INDEX) * positions).amax(dim=1)  # an all-padding row reads position 0
        final = output[torch.arange(tokens.shape[0], device=tokens.device), last]
        return self.head(self.dropout(final))


@register_model(input_shape=(256,), num_classes=2, input_kind="tokens")
def lstm_sentiment(
    num_classes: int = 2,
    *,
    vocab_size: int = 20000,
    embed_dim: int = 128,
    hidden_size: int = 256,
    num_layers: int = 2,
    seq_len: int = 256,
    dropout: float = 0.5,
) -> LSTMSentiment:
    """LSTM sentiment model; ``seq_len`` only sets ``input_shape`` (the model accepts any length)."""
    for name, value in [
        ("vocab_size", vocab_size),
        ("embed_dim", embed_dim),
        ("hidden_size", hidden_size),
        ("num_layers", num_layers),
        ("seq_len", seq_len),
    ]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2 (id {PAD_INDEX} is padding), got {vocab_size!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    return LSTMSentiment(num_classes, vocab_size, embed_dim, hidden_size, num_layers, seq_len, dropout)
