"""Training speed beside the most-used public PyTorch port of the paper, in one process, on the same batches.

    git clone https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning /tmp/port
    python benchmarks/port.py --port /tmp/port              # configuration (a) of speed.py, 2 threads
    python benchmarks/port.py --port /tmp/port --steps 2    # a quick look

The port is not part of this project (none of its code is here): `--port` names a clone of it, whose `models.py`
gives `DecoderWithAttention`. Both models get configuration (a) of `benchmarks/speed.py` (B = 32, L = 196, D = 512,
embedding = attention = LSTM = 512, 10,000 words) and the same batches of random cached annotations and captions
of COCO-like lengths, mixed within a batch as the port's loader gives them. A training step of the port is its
train.py's: its forward (which sorts by length and shrinks the batch as captions end), cross-entropy over the packed
words plus its doubly stochastic term, backward, Adam; in fp32, as the port runs. Ours is
`CaptionModule.training_step`, backward and its Adam, on those mixed batches and on the same captions sorted into
batches by length (as `data.same_length_batches`, on in the COCO configs, makes them), in fp32 and in bf16-mixed
(where the CPU has bf16 units). The cases alternate step by step, so a shared machine slows them alike; tokens/s
counts real target words (the port's decode lengths; ours, the same words and their <end>). Beam search is not
compared: the port's (caption.py) does not run on today's PyTorch and SciPy as it is (`scipy.misc.imread` is gone,
and `/` on its word indices now divides in floats).
"""

import argparse
import importlib.util
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _helpers import coco_like_words
from speed import ANNOTATION_DIM, CONFIGS, LOCATIONS, VOCABULARY, build_module, train_step
from torch.nn.utils.rnn import pack_padded_sequence

from caption.io.device import bf16_support
from caption.model.vocabulary import Vocabulary


def port_decoder(path: Path) -> torch.nn.Module:
    """The port's DecoderWithAttention at configuration (a), from its clone's models.py."""
    spec = importlib.util.spec_from_file_location("port_models", path / "models.py")
    if spec is None or not (path / "models.py").is_file():
        raise SystemExit(f"--port {path}: no models.py there (give a clone of the port's repository)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sizes = CONFIGS["a"]
    return module.DecoderWithAttention(attention_dim=sizes["attention"]["dim"], embed_dim=sizes["decoder"]["embed_dim"],
                                       decoder_dim=sizes["decoder"]["hidden_dim"], vocab_size=VOCABULARY,
                                       encoder_dim=ANNOTATION_DIM)


def mixed_batch(words: np.ndarray) -> dict[str, torch.Tensor]:
    """Captions <start> w.. <end> <pad>.. of the given lengths, random annotations (B, L, D), and each caption's
    length with <start> and <end> (the port's caption_lengths)."""
    rows, longest = len(words), int(words.max()) + 2
    captions = torch.full((rows, longest), Vocabulary.PAD)
    for row, count in enumerate(words):
        captions[row, 0] = Vocabulary.START
        captions[row, 1:count + 1] = torch.randint(len(Vocabulary.SPECIALS), VOCABULARY, (int(count),))
        captions[row, count + 1] = Vocabulary.END
    return {"annotations": torch.randn(rows, LOCATIONS, ANNOTATION_DIM), "caption": captions,
            "lengths": torch.as_tensor(words + 2)[:, None]}


def port_step(decoder: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, alpha_c: float = 1.0) -> None:
    """One step of the port's train.py: forward, packed cross-entropy + its doubly stochastic term, backward, Adam."""
    annotations = batch["annotations"].view(-1, 14, 14, ANNOTATION_DIM)  # the port's (B, 14, 14, D)
    scores, captions, decode_lengths, alphas, _ = decoder(annotations, batch["caption"], batch["lengths"])
    targets = captions[:, 1:]
    scores = pack_padded_sequence(scores, decode_lengths, batch_first=True).data
    targets = pack_padded_sequence(targets, decode_lengths, batch_first=True).data
    loss = F.cross_entropy(scores, targets) + alpha_c * ((1.0 - alphas.sum(dim=1)) ** 2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def same_length_batches(words: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """The same captions sorted by length into batches (of one length each but where a length's count runs out), as
    the same-length sampler groups them."""
    ordered = np.sort(words)
    return [ordered[start:start + batch_size] for start in range(0, len(ordered), batch_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=Path, required=True, help="a clone of the port's repository")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per case")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's, one per core)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*self.log.*")  # training_step runs without a Trainer here
    batch_size = CONFIGS["a"]["batch_size"]
    torch.manual_seed(0)
    port = port_decoder(args.port).train()
    port_optimizer = torch.optim.Adam([p for p in port.parameters() if p.requires_grad], lr=4e-4)
    precisions = ["fp32"] + ([] if bf16_support("cpu") == "none" else ["bf16"])
    ours = {precision: build_module("a", "soft", torch.device("cpu"), False).train() for precision in precisions}
    optimizers = {precision: module.configure_optimizers() for precision, module in ours.items()}
    words = coco_like_words(batch_size * (args.steps + 1), seed=1)
    mixed = [mixed_batch(words[start:start + batch_size]) for start in range(0, len(words), batch_size)]
    same = [mixed_batch(chunk) for chunk in same_length_batches(words, batch_size)]
    cases = {"port (fp32, mixed lengths)": lambda i: port_step(port, port_optimizer, mixed[i])}
    for precision in precisions:
        cases[f"ours ({precision}, mixed lengths)"] = (
            lambda i, p=precision: train_step(ours[p], optimizers[p], mixed[i], p))
        cases[f"ours ({precision}, same-length batches)"] = (
            lambda i, p=precision: train_step(ours[p], optimizers[p], same[i], p))
    seconds: dict[str, list[float]] = {case: [] for case in cases}
    for case, step in cases.items():  # warm-up on the last batch
        step(len(mixed) - 1)
    for index in range(args.steps):
        for case, step in cases.items():
            started = time.perf_counter()
            step(index)
            seconds[case].append(time.perf_counter() - started)
    tokens = int((words[: batch_size * args.steps] + 1).sum())  # words and <end> of the timed batches
    port_rate = tokens / sum(seconds["port (fp32, mixed lengths)"])
    print(f"# benchmarks/port.py {' '.join(sys.argv[1:])}; {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, bf16 matrix units: {bf16_support('cpu')}; {args.steps} steps of {batch_size} "
          f"captions, {tokens:,} target tokens\n")
    print("| case | ms / step (median) | tokens/s | ÷ the port |\n|---|---:|---:|---:|")
    for case, times in seconds.items():
        rate = tokens / sum(times)
        print(f"| {case} | {1e3 * statistics.median(times):,.0f} | {rate:,.0f} | {rate / port_rate:.2f}x |")


if __name__ == "__main__":
    main()
