"""A toy case for the harness's own tests (hidden: not listed, not offered on the command line)."""

import torch
from torch import nn

from .harness import BenchCase, dtype_from_name, register_case


class ToyMLP(nn.Module):
    """`x -> tanh(proj(x))` applied `repeat` times with one shared Linear; counts its calls."""

    def __init__(self, dim: int, repeat: int = 1):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.repeat = repeat
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        for _ in range(self.repeat):
            x = torch.tanh(self.proj(x))
        return x


@register_case("toy-mlp", tiny=dict(dim=16, batch=4), hidden=True)
def toy_mlp_case(
    *, dim: int = 64, batch: int = 32, ours_repeat: int = 1, ref_repeat: int = 1, mode: str = "train", dtype: str = "fp32"
) -> BenchCase:
    """Two copies of one ToyMLP; `ours_repeat` / `ref_repeat` make one side do more work."""

    def build_pair():
        ours = ToyMLP(dim, ours_repeat)
        ref = ToyMLP(dim, ref_repeat)
        ref.load_state_dict(ours.state_dict())
        return ours, ref

    return BenchCase(
        name="toy-mlp",
        build_pair=build_pair,
        make_batch=lambda: {"x": torch.randn(batch, dim)},
        mode=mode,
        autocast_dtype=dtype_from_name(dtype),
        description=f"ToyMLP dim {dim}, batch {batch}, repeats ours {ours_repeat} / ref {ref_repeat}",
    )
