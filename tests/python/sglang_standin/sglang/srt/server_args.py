import argparse
import dataclasses
from typing import List, Optional

PARSED = []  # argv of every prepare_server_args call


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    tp_size: int = 1
    page_size: int = 1
    attention_backend: Optional[str] = None
    speculative_algorithm: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    disaggregation_mode: str = "null"
    kv_cache_dtype: str = "auto"
    enable_deterministic_inference: bool = False
    encoder_only: bool = False
    grpc_mode: bool = False
    use_ray: bool = False
    log_level: str = "info"

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
        parser.add_argument("--page-size", type=int, default=1)
        parser.add_argument("--attention-backend", type=str)
        parser.add_argument("--speculative-algorithm", type=str)
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--disaggregation-mode", type=str, default="null")
        parser.add_argument("--kv-cache-dtype", type=str, default="auto")
        parser.add_argument("--enable-deterministic-inference", action="store_true")
        parser.add_argument("--encoder-only", action="store_true")
        parser.add_argument("--grpc-mode", action="store_true")
        parser.add_argument("--use-ray", action="store_true")
        parser.add_argument("--log-level", type=str, default="info")

    @classmethod
    def from_cli_args(cls, args):
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names})


def prepare_server_args(argv: List[str]) -> ServerArgs:
    PARSED.append(list(argv))
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))
