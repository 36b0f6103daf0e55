"""How long the `caption` command takes to answer: `--help`, `--version`, a mistyped command, each command's `--help`,
and `caption fit --help-all` (every option: LightningCLI's parser).

    python benchmarks/cli_startup.py                 # 7 runs of each, median and range
    python benchmarks/cli_startup.py --repeats 3
    python benchmarks/cli_startup.py --commands "caption --help" "caption fit --help"   # some commands only

Each run is a new process, `python -m caption.cli ...` (what the `caption` script runs, interpreter start
included), timed from start to exit; the first run of each warms the file cache and is not counted.
Prints a Markdown table.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date

from _helpers import cpu_name

COMMANDS = {
    "caption --help": ["--help"],
    "caption --version": ["--version"],
    "caption trian (a mistyped command)": ["trian"],
    **{f"caption {name} --help": [name, "--help"] for name in ("describe", "evaluate", "compare", "features")},
    "caption fit --help": ["fit", "--help"],  # the kept short help (caption.cli.lightning.short_help)
    "caption fit --help-all": ["fit", "--help-all"],  # LightningCLI's parser, built
}


def seconds(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "caption.cli", *args], capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each command (default 7)")
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS), metavar="COMMAND",
                        help="the commands to time, named as the table names them (default: all)")
    args = parser.parse_args()
    print(f"# {date.today()}, {cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| command | median, s | fastest – slowest, s |")
    print("|---|---:|---|")
    for name in args.commands:
        command = COMMANDS[name]
        seconds(command)  # warm-up
        times = [seconds(command) for _ in range(args.repeats)]
        print(f"| `{name}` | {statistics.median(times):.2f} | {min(times):.2f} – {max(times):.2f} |")


if __name__ == "__main__":
    main()
