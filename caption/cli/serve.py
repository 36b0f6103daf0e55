"""`caption serve`: a local page that shows, word by word, where a model looked.

    caption serve --ckpt_path runs/shapes_soft                                  # then open http://127.0.0.1:8000/
    caption serve --ckpt_path runs/shapes_soft --ckpt_path runs/shapes_hard     # soft and hard side by side
    caption serve --ckpt_path best.ckpt --port 8080 --predictions.num_captions 3

Drop an image on the page (or pick one of the test images of the first model's data, when that data is on this
machine): each model's caption appears, with its n best when asked; hovering a word shows its attention over the
image as `captioner.plot` draws it (upsampled, smoothed, over the grey image), with β and, for hard attention, the
cell it chose. A run folder stands for its newest model-selection checkpoint, as for `caption compare`. The server
listens on 127.0.0.1 (this machine only) unless --host says otherwise, and answers only requests that name it
(`caption.serving.server`: the Host header); the page needs no network. Ctrl-C stops it.
"""

import math
from pathlib import Path

from caption.cli.options import CommandParser, add_config, add_device, add_num_captions, device
from caption.errors import ConfigError
from caption.serving import MAX_CAPTIONS, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT, TIMEOUT_S, UPLOAD_TIMEOUT_S


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption serve",
        description="A local page: drop an image, see each model's captions and each word's attention.",
    )
    parser.add_argument("--ckpt_path", action="append", required=True,
                        metavar="CKPT_OR_RUN", help="checkpoint or run folder; twice to compare two models side by "
                                                    "side (alias: --ckpt)")
    parser.add_argument("--names", nargs="+", default=None, help="a name per model (default: soft, hard, ...)")
    add_config(parser, default=None,
               help="YAML with the training `data:` section, for checkpoints that do not record it")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 opens the page "
                             "to the network)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0: any free port)")
    parser.add_argument("--allowed_hosts", nargs="+", default=[], metavar="NAME",
                        help="names the page may also be opened by (e.g. this machine's name on the network); "
                             "requests naming another host are refused (default: 127.0.0.1, localhost, [::1] and "
                             "--host; with --host 0.0.0.0 also any IP address)")
    parser.add_argument("--timeout_s", type=float, default=TIMEOUT_S,
                        help=f"seconds a connection has to send its request line and headers, and at most between "
                             f"two pieces of its body (default: {TIMEOUT_S:g})")
    parser.add_argument("--upload_timeout_s", type=float, default=UPLOAD_TIMEOUT_S,
                        help=f"seconds a request has to send its whole body (an uploaded image) once its headers are "
                             f"in (default: {UPLOAD_TIMEOUT_S:g})")
    parser.add_argument("--max_connections", type=int, default=MAX_CONNECTIONS,
                        help=f"connections served at once; the next ones get 503 at once (default: {MAX_CONNECTIONS})")
    parser.add_argument("--max_connections_per_client", type=int, default=MAX_CONNECTIONS_PER_CLIENT,
                        help=f"connections of one client address served at once; its next ones get 429 at once "
                             f"(default: {MAX_CONNECTIONS_PER_CLIENT})")
    add_num_captions(parser, default=1, help=f"captions per image the page starts with, best first (default: 1; at "
                                             f"most {MAX_CAPTIONS})")
    parser.add_argument("--test_images", type=int, default=12,
                        help="test images of the first model's data offered on the page (default: 12)")
    parser.add_argument("--max_upload_mb", type=float, default=20.0, help="largest image accepted (default: 20 MB)")
    add_device(parser)
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")
    if args.predictions.num_captions > MAX_CAPTIONS:
        parser.error(f"--predictions.num_captions must be at most {MAX_CAPTIONS}, got {args.predictions.num_captions}")
    if args.test_images < 0 or args.max_upload_mb <= 0:
        parser.error("--test_images must be >= 0 and --max_upload_mb > 0")
    for option in ("timeout_s", "upload_timeout_s"):
        if not (math.isfinite(seconds := getattr(args, option)) and seconds > 0):
            parser.error(f"--{option} must be a number > 0, got {seconds:g}")
    for option in ("max_connections", "max_connections_per_client"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be >= 1, got {getattr(args, option)}")
    from caption.reports.runs import read_models  # torch and Lightning: imported after --help has answered
    from caption.serving.server import AttentionServer
    from caption.serving.viewer import AttentionViewer

    checkpoints = [Path(ckpt_path) for ckpt_path in args.ckpt_path]  # jsonargparse: no type for appended values
    models = read_models(checkpoints, names=args.names, device=device(args), config=args.config,
                         precision=args.trainer.precision)
    viewer = AttentionViewer(models, num_captions=args.predictions.num_captions, test_images=args.test_images)
    try:
        server = AttentionServer((args.host, args.port), viewer, max_upload_bytes=int(args.max_upload_mb * 1e6),
                                 timeout_s=args.timeout_s, upload_timeout_s=args.upload_timeout_s,
                                 max_connections=args.max_connections,
                                 max_connections_per_client=args.max_connections_per_client,
                                 allowed_hosts=args.allowed_hosts)
    except OSError as error:  # the port is taken, or the host is not this machine's
        raise ConfigError(f"cannot listen on {args.host}:{args.port} ({error.strerror or error}): pick another "
                          "--port (or --host)") from None
    for model in models:
        print(f"{model.name}: {model.checkpoint}")
    if viewer.test_images.problem is not None:
        print(viewer.test_images.problem)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"listening on {args.host}: anyone who can reach this machine can use the page")
    print(f"serving on {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
