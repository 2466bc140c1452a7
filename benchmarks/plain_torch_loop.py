#!/usr/bin/env python
"""A plain, hand-written PyTorch training loop: the yardstick for dlperf's harness overhead.

What it is for
--------------
dlperf wraps a training step in a harness (events, bookkeeping, result records). That harness
must not slow the thing it measures: dlperf's throughput for a model must be at least 0.98 of
the throughput this script reports for the same model, batch size, precision and device.
So this file is deliberately *independent* of dlperf (it does not import it) and as close as
reasonable to the fastest loop a PyTorch user would write by hand:

* synthetic data generated on the device before timing (no input pipeline, no H2D copies);
* no host synchronisation inside the timed loop (``--sync-every-step`` exists only to show
  what a per-step sync costs, see docs/measurement.md rule 2);
* ``optimizer.zero_grad(set_to_none=True)``, the default (foreach) SGD, bf16 autocast for
  mixed precision, ``cudnn.benchmark = True`` and TF32 switched on/off *explicitly*;
* GPT-2: ``F.scaled_dot_product_attention(is_causal=True)`` (flash attention on CUDA in bf16,
  the memory-efficient kernel in fp32, both with their dropout on the attention probabilities)
  behind one fused Q/K/V projection, and the *fused* AdamW on CUDA (``--optimizer-impl``;
  dlperf's torch adapter uses PyTorch's default, foreach, so on CUDA the two differ there).

The models follow docs/zoo.md. AlexNet and ResNet-50 come from torchvision
(``weights=None``) when it imports, on purpose: that is an implementation written by other
people, so a mistake in dlperf's own zoo cannot hide in both. Without torchvision a compact
definition with the same layout (and the same parameter count) is used instead. GPT-2 is
written here from the paper and OpenAI's released layout (Hugging Face names), not from dlperf.

How to run it
-------------
    python benchmarks/plain_torch_loop.py --model resnet50 --batch-size 128 \
        --precision bf16 --device cuda --warmup 30 --iters 200 --repeats 3 --json out.json

    python benchmarks/plain_torch_loop.py --model gpt2_small --batch-size 8 --precision bf16 \
        --device cuda --warmup 30 --iters 100 --json out.json

    python benchmarks/plain_torch_loop.py --model fcn5_tiny --batch-size 8 --device cpu \
        --warmup 2 --iters 5            # a quick CPU check

Models: fcn5 fcn8 fcn_mnist alexnet alexnet_cifar resnet50 resnet56 lstm gpt2_small, and the
CPU-test variants fcn5_tiny lstm_tiny gpt2_small_tiny. Precision: fp32 (TF32 off: matmul and
cuDNN ``fp32_precision = "ieee"``, or ``allow_tf32 = False`` on PyTorch < 2.9), tf32 (TF32 on),
bf16 (autocast to bfloat16, TF32 off for whatever stays in fp32). Language models (lstm,
gpt2_small) report tokens/s = samples/s x sequence length (35 and 1024), loss = cross-entropy
over every position.

Timing: ``--warmup`` steps once, then ``--repeats`` blocks of ``--iters`` steps each. A block is
timed by the host clock between two ``torch.cuda.synchronize()`` calls, so the device has
finished everything it was given (rule 1), and nothing inside the block waits for the device
(rule 2). Mean step time = block time / iters; samples/s = iters * batch / block time.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # torchvision is optional: used for alexnet/resnet50 when present (see docstring).
    import torchvision

    HAVE_TORCHVISION = True
except Exception:  # noqa: BLE001 - any import failure (missing, ABI mismatch) means "absent"
    torchvision = None
    HAVE_TORCHVISION = False


# --------------------------------------------------------------------------------------------
# Models (docs/zoo.md). Each builder returns (module, input_kind, input_shape, num_classes).
# input_kind: "vector" / "image" (float32 randn) or "tokens" (int64 ids, CE over all tokens).
# --------------------------------------------------------------------------------------------


def fcn(sizes: list[int]) -> nn.Sequential:
    """Fully connected net: Linear (with bias) layers with a sigmoid between them, none after
    the last (the loss applies the softmax)."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(nn.Sigmoid())
    return nn.Sequential(*layers)


class AlexNet(nn.Module):
    """Fallback AlexNet: torchvision's layout (64-192-384-256-256 conv, no LRN, dropout,
    4096-4096-1000 FC); 61,100,840 parameters."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits in the 3x3 conv (torchvision, NVIDIA v1.5)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """Fallback ResNet-50 v1.5 in torchvision's layout; 25,557,032 parameters."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
            nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        blocks: list[nn.Module] = []
        cin = 64
        for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():  # torchvision's initialisation (speed does not depend on it)
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def alexnet_cifar() -> nn.Sequential:
    """cuda-convnet "layers-18pct" as in Shi et al. 2016 (AlexNet-R): three 5x5 convs
    (32, 32, 64; pad 2), 3x3/2 pools (pad 1) of type max, avg, avg as in layers-18pct and
    Caffe's cifar10_full (average pools exclude the padding), then FC 1024 -> 10.
    32x32 -> 16 -> 8 -> 4, so the FC input is 64 * 4 * 4 = 1024."""
    def avg() -> nn.Module:
        return nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(3, stride=2, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(inplace=True), avg(),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True), avg(),
        nn.Flatten(), nn.Linear(64 * 4 * 4, 10),
    )


class CifarBasicBlock(nn.Module):
    """CIFAR ResNet basic block with the option-A shortcut: when the shape changes, subsample
    by 2 and zero-pad the new channels (no parameters), He et al. 2016 sec. 4.2."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride = stride
        self.pad = cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        shortcut = x
        if self.stride != 1 or self.pad:
            shortcut = x[:, :, ::self.stride, ::self.stride]
            # Pad channels symmetrically: (W_left, W_right, H_top, H_bottom, C_front, C_back).
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + shortcut, inplace=True)


class ResNetCifar(nn.Module):
    """ResNet-(6n+2) for CIFAR: 3 stages of n basic blocks, 16/32/64 channels; n=9 -> 56."""

    def __init__(self, n: int = 9, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        blocks: list[nn.Module] = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(CifarBasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class WordLM(nn.Module):
    """Word language model (Zaremba et al. 2014, medium): embedding, multi-layer LSTM
    (batch_first), linear to the vocabulary; dropout on every non-recurrent connection
    (after the embedding, between layers, before the decoder), as Zaremba et al. do. The hidden state starts
    at zero every step (no state carried between batches): a pure compute benchmark."""

    def __init__(self, vocab: int, emb: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(emb, hidden, layers, batch_first=True, dropout=dropout)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.drop(self.embedding(tokens)))
        return self.decoder(self.drop(out))  # [B, T, vocab]


class CausalSelfAttention(nn.Module):
    """GPT-2 attention: one fused ``c_attn`` Linear(d, 3d) for Q, K, V, causal
    ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on CUDA, with their
    dropout on the attention probabilities), output ``c_proj`` Linear(d, d)."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads, self.dropout = heads, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, d] -> [B, T, d]
        B, T, d = x.shape
        # [B, T, 3, heads, dh] -> three [B, heads, T, dh] views (no copies before SDPA).
        q, k, v = self.c_attn(x).view(B, T, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, d))


class GPT2Block(nn.Module):
    """Pre-LN block: x += drop(attn(ln_1(x))); x += drop(mlp(ln_2(x))); GELU (tanh)."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = CausalSelfAttention(d, heads, dropout)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, ffn)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(ffn, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.c_proj(self.act(self.c_fc(self.ln_2(x)))))


class GPT2(nn.Module):
    """GPT-2 (Radford et al. 2019), written here from the paper and OpenAI's released layout
    (Hugging Face ``GPT2LMHeadModel`` names): token ``wte`` + learned position ``wpe``
    embeddings, dropout, pre-LN blocks, final ``ln_f``, logits = ``ln_f(x) @ wte.T`` (tied, no
    bias). Small: vocab 50257, context 1024, 12 layers, d 768, 12 heads, FFN 3072, dropout 0.1:
    124,439,808 parameters. Init N(0, 0.02), residual projections N(0, 0.02/sqrt(2 L))
    (sec. 2.3), biases 0 (speed does not depend on it). [B, T] int64 -> [B, T, vocab]."""

    def __init__(self, vocab: int, context: int, layers: int, d: int, heads: int, ffn: int,
                 dropout: float) -> None:
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(GPT2Block(d, heads, ffn, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        for name, prm in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(prm)
            elif prm.dim() == 2:
                std = 0.02 / (2 * layers) ** 0.5 if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(prm, 0.0, std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        x = self.drop(self.wte(tokens) + self.wpe.weight[:T])
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


#: GPT-2 sizes: (vocab, context, layers, d, heads, ffn, dropout). The tiny variant has the
#: hyper-parameters of dlperf's gpt2_small_tiny (CPU tests).
GPT2_SIZES = {
    "gpt2_small": (50257, 1024, 12, 768, 12, 3072, 0.1),
    "gpt2_small_tiny": (256, 32, 2, 32, 2, 64, 0.1),
}


def build_model(name: str, seq_len: int | None):
    """Return (model, input_kind, input_shape, num_classes, uses_torchvision)."""
    if name == "fcn5":
        return fcn([26752, 2048, 2048, 2048, 26752]), "vector", (26752,), 26752, False
    if name == "fcn8":
        return fcn([26752] + [2048] * 6 + [26752]), "vector", (26752,), 26752, False
    if name == "fcn5_tiny":
        return fcn([512, 128, 128, 128, 512]), "vector", (512,), 512, False
    if name == "fcn_mnist":
        # MNIST 28x28 flattened to 784 features (a reshape costs nothing either way).
        return fcn([784, 2048, 4096, 1024, 10]), "vector", (784,), 10, False
    if name == "alexnet":
        model = torchvision.models.alexnet(weights=None) if HAVE_TORCHVISION else AlexNet()
        return model, "image", (3, 224, 224), 1000, HAVE_TORCHVISION
    if name == "resnet50":
        model = torchvision.models.resnet50(weights=None) if HAVE_TORCHVISION else ResNet50()
        return model, "image", (3, 224, 224), 1000, HAVE_TORCHVISION
    if name == "alexnet_cifar":
        return alexnet_cifar(), "image", (3, 32, 32), 10, False
    if name == "resnet56":
        return ResNetCifar(9), "image", (3, 32, 32), 10, False
    if name == "lstm":
        model = WordLM(10000, 650, 650, 2, 0.5)
        return model, "tokens", (seq_len or 35,), 10000, False
    if name == "lstm_tiny":
        model = WordLM(10000, 32, 32, 2, 0.5)
        return model, "tokens", (seq_len or 16,), 10000, False
    if name in GPT2_SIZES:
        vocab, context = GPT2_SIZES[name][:2]
        if seq_len is not None and not 1 <= seq_len <= context:
            raise ValueError(f"--seq-len {seq_len} for {name}: must be 1..{context} (context)")
        return GPT2(*GPT2_SIZES[name]), "tokens", (seq_len or context,), vocab, False
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES)}")


MODEL_NAMES = ("fcn5", "fcn8", "fcn_mnist", "alexnet", "alexnet_cifar", "resnet50", "resnet56",
               "lstm", "gpt2_small", "fcn5_tiny", "lstm_tiny", "gpt2_small_tiny")

def make_optimizer(name: str, model: nn.Module, impl: str = "foreach") -> torch.optim.Optimizer:
    """The optimizer of each model's spec (docs/zoo.md): SGD + momentum 0.9 for FCN/CNN, plain
    SGD lr 1.0 for the LSTM (Zaremba et al.), with SGD's foreach left at its default (on for
    CUDA tensors). GPT-2: AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 (GPT-3
    paper table 2.1 "Small"), decay on *every* parameter as dlperf's spec does (its optimizer
    spec cannot exempt biases and LayerNorms; nanoGPT exempts the 1-D ones), implementation
    ``impl``: "fused" (one multi-tensor CUDA kernel) or "foreach". SGD takes ``impl`` too when it
    is "fused" or "foreach" (``--optimizer-impl`` given explicitly); "default" leaves SGD at
    PyTorch's own choice (foreach for CUDA tensors)."""
    if name.startswith("gpt2"):
        return torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                                 weight_decay=0.1, fused=impl == "fused",
                                 foreach=impl == "foreach")
    sgd_impl = ({"fused": True} if impl == "fused" else {"foreach": True} if impl == "foreach"
                else {})
    if name.startswith("lstm"):
        return torch.optim.SGD(model.parameters(), lr=1.0, **sgd_impl)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **sgd_impl)


def apply_precision(precision: str) -> dict:
    """Set float32 matmul / cuDNN precision for ``precision`` explicitly (TF32 only for
    "tf32"; under bf16 autocast what stays fp32 stays IEEE fp32) and return it as applied.

    PyTorch >= 2.9 has the ``fp32_precision`` API ("ieee" / "tf32") and raises when the legacy
    ``allow_tf32`` getters are read after a mix of both, so only one API is used: the new one
    where it exists (matmul, cuDNN conv and cuDNN RNN all set), ``allow_tf32`` otherwise.
    """
    tf32 = precision == "tf32"
    mm, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(mm, "fp32_precision") and hasattr(getattr(cudnn, "conv", None), "fp32_precision"):
        value = "tf32" if tf32 else "ieee"
        mm.fp32_precision = cudnn.conv.fp32_precision = cudnn.rnn.fp32_precision = value
        return {"allow_tf32_matmul": mm.fp32_precision == "tf32",
                "allow_tf32_cudnn": cudnn.conv.fp32_precision == "tf32",
                "matmul_fp32_precision": mm.fp32_precision,
                "cudnn_conv_fp32_precision": cudnn.conv.fp32_precision,
                "cudnn_rnn_fp32_precision": cudnn.rnn.fp32_precision}
    mm.allow_tf32 = tf32
    cudnn.allow_tf32 = tf32
    return {"allow_tf32_matmul": mm.allow_tf32, "allow_tf32_cudnn": cudnn.allow_tf32}


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="one of: " + ", ".join(MODEL_NAMES))
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--repeats", type=int, default=1, help="measurement blocks after one warm-up")
    p.add_argument("--seq-len", type=int, default=None,
                   help="sequence length override (LSTM; GPT-2 up to its context)")
    p.add_argument("--sync-every-step", action="store_true",
                   help="synchronize after every step and record per-step host times "
                        "(changes what is measured: for comparison only)")
    p.add_argument("--json", metavar="OUT.json", help="write the result as JSON here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--channels-last", action="store_true",
                   help="CNNs: model and images in torch.channels_last (NHWC), as the PyTorch "
                        "performance tuning guide recommends on CUDA (dlperf's layout=auto)")
    p.add_argument("--optimizer-impl", choices=("auto", "fused", "foreach"), default="auto",
                   help="the optimizer's implementation: fused (one CUDA kernel) or foreach. "
                        "auto: GPT-2's AdamW fused on CUDA, foreach on CPU; SGD at "
                        "PyTorch's default (foreach for CUDA tensors)")
    args = p.parse_args(argv)

    if args.model not in MODEL_NAMES:
        p.error(f"unknown model {args.model!r}; choose one of: {', '.join(MODEL_NAMES)}")
    if args.batch_size < 1 or args.iters < 1 or args.warmup < 0 or args.repeats < 1:
        p.error("--batch-size, --iters and --repeats must be >= 1, --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda requested but torch.cuda.is_available() is False")

    device = torch.device(args.device)
    on_cuda = device.type == "cuda"
    opt_impl = args.optimizer_impl
    if opt_impl == "auto":  # AdamW: fused on CUDA; SGD: PyTorch's default
        opt_impl = ("fused" if on_cuda else "foreach") if args.model.startswith("gpt2") \
            else "default"

    # Precision policy, set explicitly whatever the defaults are (docs/measurement.md rule 6).
    # TF32 only for --precision tf32; under bf16 autocast what stays fp32 stays true fp32.
    precision_flags = apply_precision(args.precision)
    # Autotune convolution algorithms once per shape (the warm-up pays for it).
    torch.backends.cudnn.benchmark = True
    use_bf16 = args.precision == "bf16"

    torch.manual_seed(args.seed)
    try:
        model, kind, in_shape, num_classes, used_tv = build_model(args.model, args.seq_len)
    except ValueError as e:
        p.error(str(e))
    model = model.to(device)
    cl = args.channels_last and kind == "image"
    if cl:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    optimizer = make_optimizer(args.model, model, opt_impl)

    # Synthetic data, made on the device before timing: 4 distinct batches cycled through, so
    # no step reads the same input as the one before it and no H2D copy is in the loop.
    B = args.batch_size
    batches = []
    for _ in range(4):
        if kind == "tokens":
            x = torch.randint(0, num_classes, (B, *in_shape), device=device, dtype=torch.int64)
            y = torch.randint(0, num_classes, (B, *in_shape), device=device, dtype=torch.int64)
        else:
            x = torch.randn((B, *in_shape), device=device, dtype=torch.float32)
            y = torch.randint(0, num_classes, (B,), device=device, dtype=torch.int64)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        batches.append((x, y))
    tokens_per_sample = in_shape[0] if kind == "tokens" else 0

    def sync() -> None:
        if on_cuda:
            torch.cuda.synchronize(device)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        # The whole training step, nothing else: no .item(), no host reads of the loss.
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            out = model(x)
            # reshape covers both [B, C] logits and [B, T, V] LM logits (CE over all tokens).
            loss = F.cross_entropy(out.reshape(-1, num_classes), y.reshape(-1))
        loss.backward()
        optimizer.step()

    # Warm-up (rule 3): the first step (cudnn autotune, allocator growth, lazy init) is timed
    # on its own and reported; the rest of the warm-up is timed as a whole. Neither is counted.
    sync()
    t = time.perf_counter()
    first_step_s = None
    for i in range(args.warmup):
        step(*batches[i % 4])
        if i == 0:
            sync()
            first_step_s = time.perf_counter() - t
    sync()
    warmup_s = time.perf_counter() - t

    repeats = []
    for _ in range(args.repeats):
        gc.collect()  # start each block with no garbage pending (a collection mid-block is noise)
        step_times: list[float] = []
        sync()
        t0 = time.perf_counter()
        if args.sync_every_step:
            # Consecutive timestamps, so the per-step times add up exactly to the block time.
            prev = t0
            for i in range(args.iters):
                step(*batches[i % 4])
                sync()
                now = time.perf_counter()
                step_times.append(now - prev)
                prev = now
        else:
            for i in range(args.iters):
                step(*batches[i % 4])
        sync()
        t1 = time.perf_counter()
        total = t1 - t0
        rec = {
            "total_s": total,
            "mean_step_s": total / args.iters,
            "samples_per_s": args.iters * B / total,
            "tokens_per_s": args.iters * B * tokens_per_sample / total,
        }
        if args.sync_every_step:
            rec["median_step_s"] = statistics.median(step_times)
            rec["step_times_s"] = step_times
        repeats.append(rec)

    # Headline: the median block (one block -> that block). Throughput is derived from the
    # headline step time, so samples_per_s * mean_step_s == batch_size holds exactly.
    mean_step_s = statistics.median(r["mean_step_s"] for r in repeats)
    best_step_s = min(r["mean_step_s"] for r in repeats)
    result = {
        "model": args.model,
        "batch_size": B,
        "precision": args.precision,
        "device": args.device,
        "iters": args.iters,
        "warmup": args.warmup,
        "sync_every_step": args.sync_every_step,
        "mean_step_s": mean_step_s,
        "samples_per_s": B / mean_step_s,
        "tokens_per_s": B * tokens_per_sample / mean_step_s,
        "best_mean_step_s": best_step_s,
        "best_samples_per_s": B / best_step_s,
        "median_samples_per_s": statistics.median(r["samples_per_s"] for r in repeats),
        "repeats": repeats,
        "first_step_s": first_step_s,
        "warmup_s": warmup_s,
        "params": n_params,
        "seq_len": tokens_per_sample or None,
        "torchvision_model": used_tv,
        "flags": {  # every switch that changes speed (rule 6)
            **precision_flags,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "autocast_bf16": use_bf16,
            "channels_last": cl,
            "optimizer": type(optimizer).__name__,
            "optimizer_defaults": {k: (list(v) if isinstance(v, tuple) else v)
                                   for k, v in optimizer.defaults.items()
                                   if isinstance(v, (int, float, bool, type(None), tuple))},
            # AdamW: "fused" or "foreach" as asked; SGD: PyTorch's default (foreach on CUDA).
            "optimizer_impl": opt_impl,
            "attention": "F.scaled_dot_product_attention(is_causal=True)"
            if args.model.startswith("gpt2") else None,
            "cpu_threads": torch.get_num_threads(),
        },
        "torch_version": torch.__version__,
        "torchvision_version": getattr(torchvision, "__version__", None),
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if on_cuda else None,
        "python_version": platform.python_version(),
        "device_name": torch.cuda.get_device_name(device) if on_cuda
        else (platform.processor() or platform.machine()),
    }
    if args.sync_every_step:
        result["median_step_s"] = statistics.median(r["median_step_s"] for r in repeats)

    line = (f"{args.model} bs={B} {args.precision} {args.device} params={n_params:,}: "
            f"{mean_step_s * 1e3:.3f} ms/step, {result['samples_per_s']:.1f} samples/s")
    if tokens_per_sample:
        line += f", {result['tokens_per_s']:.0f} tokens/s"
    if args.repeats > 1:
        line += (f" (median of {args.repeats} blocks; best {best_step_s * 1e3:.3f} ms/step, "
                 f"{result['best_samples_per_s']:.1f} samples/s)")
    if args.sync_every_step:
        line += f" [sync every step; per-step median {result['median_step_s'] * 1e3:.3f} ms]"
    print(line, flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
