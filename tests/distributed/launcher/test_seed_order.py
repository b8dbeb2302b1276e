"""The seeds' argument order for ``python -m neural_arch.distributed.launcher`` (args.seed_order).

Run: ``pytest tests/distributed/launcher/test_seed_order.py`` (in-process, < 1 s).

Seed 003 writes ``launcher train.py --nproc_per_node=8 ... --backend=nccl``; torchrun's rule (what
``neural-arch launch`` follows) gives those to the script. The module entry point keeps the seeds'
order only where it cannot be a script's own arguments: every token after the script a launcher option.
"""

from neural_arch.distributed.launcher.args import parse_launch_args, seed_order

SEED = ["train.py", "--nproc_per_node=8", "--nnodes=1", "--master_addr=localhost", "--master_port=29500"]


def test_the_seed_command_gives_its_options_to_the_launcher():
    ns = parse_launch_args(seed_order([*SEED, "--backend=nccl"]), environ={})
    assert (ns.script, ns.script_args, ns.nproc_per_node, ns.master_port) == ("train.py", [], "8", 29500)


def test_a_script_argument_that_is_no_launcher_option_keeps_torchruns_rule():
    argv = ["argv.py", "--epochs", "3", "--backend", "gloo", "--log_dir", "logs", "--verbose"]
    assert seed_order(argv) == argv
    ns = parse_launch_args(seed_order(argv), environ={})
    assert ns.script_args == argv[1:]


def test_options_before_the_script_or_a_help_flag_leave_the_order_alone():
    for argv in (["--nproc_per_node=2", "s.py", "--backend", "gloo"], ["s.py", "--help"], ["s.py"], ["s.py", "-m"]):
        assert seed_order(argv) == argv
