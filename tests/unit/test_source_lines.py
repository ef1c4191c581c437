"""Where the user's code sets a loader's worker count: real files, read through this process's
/proc/<pid>/root as a job's are."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Optional

from dltop.collect.stacks.source_lines import MAX_SOURCE_BYTES, LoaderSite, SourceLines


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def at(path: str, needle: str, nth: int = 0) -> str:
    """'file:line' of the nth line holding needle."""
    numbers = [n for n, text in enumerate(Path(path).read_text().splitlines(), 1) if needle in text]
    return f"{path}:{numbers[nth]}"


def find(paths: list[str], dataset: Optional[str] = None) -> Optional[LoaderSite]:
    return SourceLines().loader_call(os.getpid(), paths, dataset)


def test_a_plain_dataloader_call_with_a_literal_count_has_no_flag(tmp_path):
    path = write(tmp_path, "train.py", """\
        import argparse
        from torch.utils.data import DataLoader  # DataLoader(
        parser = argparse.ArgumentParser()
        parser.add_argument("--workers", type=int)
        args = parser.parse_args()
        loader = DataLoader(
            ImageDataset("/data"),
            batch_size=8,
            num_workers=4,
        )
        """)  # fmt: skip
    assert find([path], "ImageDataset") == LoaderSite(
        at(path, "loader = DataLoader("), "DataLoader", "num_workers", "torch"
    )


def test_timm_create_loader_names_its_call_and_the_workers_flag(tmp_path):
    # timm's train.py: the count is 20 lines into the call, its flag in an argument group
    options = "".join(f"    option_{i}=args.option_{i},\n" for i in range(20))
    path = write(tmp_path, "train.py", f"""\
import argparse
from timm.data import create_loader, create_transform
parser = argparse.ArgumentParser()
group = parser.add_argument_group("Miscellaneous parameters")
group.add_argument('-j', '--workers', type=int, default=4, metavar='N',
                   help='how many training processes to use (default: 4)')
args = parser.parse_args()
transform = create_transform(224, num_workers=2)
loader_train = create_loader(
    dataset_train,
{options}    num_workers=args.workers,
    distributed=args.distributed,
)
""")  # fmt: skip
    site = find([path], "ImageDataset")
    assert site == LoaderSite(at(path, "create_loader("), "create_loader", "num_workers", "timm", "--workers")


def test_timm_train_and_eval_loaders_on_one_flag_give_the_flag_without_a_line(tmp_path):
    path = write(tmp_path, "train.py", """\
        parser.add_argument('-j', '--workers', type=int, default=4)
        loader_train = create_loader(dataset_train, is_training=True, num_workers=args.workers)
        loader_eval = create_loader(dataset_eval, is_training=False, num_workers=args.workers)
        """)  # fmt: skip
    assert find([path], "ImageDataset") == LoaderSite(None, "create_loader", "num_workers", "timm", "--workers")


def test_loaders_on_different_counts_are_unsure(tmp_path):
    path = write(tmp_path, "train.py", """\
        parser.add_argument('-j', '--workers', type=int, default=4)
        loader_train = create_loader(dataset_train, num_workers=args.workers)
        eval_workers = args.workers
        if args.distributed:
            eval_workers = min(2, args.workers)
        loader_eval = create_loader(dataset_eval, num_workers=eval_workers)
        """)  # fmt: skip
    assert find([path], "ImageDataset") is None


def test_training_arguments_set_dataloader_num_workers(tmp_path):
    path = write(tmp_path, "finetune.py", """\
        from transformers import Trainer, TrainingArguments
        training_args = TrainingArguments(
            output_dir="out",
            per_device_train_batch_size=16,
            dataloader_num_workers=4,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=train_ds)
        """)  # fmt: skip
    site = find([path], "Dataset")
    assert site == LoaderSite(
        at(path, "TrainingArguments("), "TrainingArguments", "dataloader_num_workers", "transformers"
    )


def test_training_arguments_from_the_command_line_name_their_flag(tmp_path):
    path = write(tmp_path, "run_glue.py", """\
        from transformers import HfArgumentParser, TrainingArguments
        parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()
        """)  # fmt: skip
    site = find([path])
    assert site is not None and site.where == at(path, "HfArgumentParser((") and site.flag == "--dataloader_num_workers"


def test_an_argument_parser_without_training_arguments_builds_nothing(tmp_path):
    path = write(tmp_path, "run.py", "parser = HfArgumentParser((ModelArguments, DataTrainingArguments))\n")
    assert find([path]) is None


def test_a_dataloader_call_beats_a_builder(tmp_path):
    # a user's own DataLoader handed to accelerate, beside TrainingArguments for another part
    path = write(tmp_path, "train.py", """\
        args = TrainingArguments(output_dir="out", dataloader_num_workers=2)
        loader = DataLoader(ds, batch_size=8, num_workers=opts.jobs)
        model, loader = accelerator.prepare(model, loader)
        """)  # fmt: skip
    args = write(tmp_path, "cli.py", 'parser.add_argument("--num-jobs", "--jobs", dest="jobs", type=int)\n')
    site = find([path, args], "MyDataset")
    assert site == LoaderSite(at(path, "DataLoader("), "DataLoader", "num_workers", "torch", "--num-jobs")


def test_two_dataloaders_told_apart_by_the_dataset_class_or_its_variable(tmp_path):
    path = write(tmp_path, "train.py", """\
        parser.add_argument("--train-workers", type=int)
        train_set = ImageDataset("/data/train")
        train_loader = DataLoader(
            train_set, batch_size=64, shuffle=True,
            num_workers=args.train_workers)
        val_loader = DataLoader(TextDataset("/data/val"), num_workers=2)
        """)  # fmt: skip
    by_variable = find([path], "ImageDataset")
    assert by_variable == LoaderSite(
        at(path, "train_loader ="), "DataLoader", "num_workers", "torch", "--train-workers"
    )
    by_class = find([path], "TextDataset")
    assert by_class == LoaderSite(at(path, "val_loader ="), "DataLoader", "num_workers", "torch")


def test_two_dataloaders_neither_named_are_unsure(tmp_path):
    path = write(tmp_path, "train.py", """\
        train_loader = DataLoader(make_train(), num_workers=4)
        val_loader = DataLoader(make_val(), num_workers=2)
        """)  # fmt: skip
    assert find([path], "ImageDataset") is None
    assert find([path]) is None


def test_a_local_is_followed_to_the_flag_it_was_assigned(tmp_path):
    path = write(tmp_path, "train.py", """\
        def main():
            parser.add_argument("--data-workers", type=int)
            args = parser.parse_args()
            workers = args.data_workers  # from the command line
            return DataLoader(ds, num_workers=workers)
        """)  # fmt: skip
    assert find([path]).flag == "--data-workers"


def test_a_lightning_datamodule_gets_its_count_from_its_constructor(tmp_path):
    module = write(tmp_path, "data.py", """\
        class MyDataModule(L.LightningDataModule):
            def __init__(self, num_workers: int = 0):
                super().__init__()
                self.save_hyperparameters()

            def train_dataloader(self):
                return DataLoader(self.train_set, num_workers=self.hparams.num_workers)
        """)  # fmt: skip
    main = write(tmp_path, "main.py", """\
        parser.add_argument("-w", "--workers", type=int, default=4)
        args = parser.parse_args()
        trainer.fit(model, datamodule=MyDataModule(num_workers=args.workers))
        """)  # fmt: skip
    site = find([main, module], "ImageDataset")
    assert site == LoaderSite(at(module, "DataLoader("), "DataLoader", "num_workers", "torch", "--workers")


def test_a_lightning_datamodule_under_lightning_cli_gets_its_data_option(tmp_path):
    module = write(tmp_path, "data.py", """\
        class MyDataModule(LightningDataModule):
            def __init__(self, num_workers: int = 0):
                self.num_workers = num_workers

            def train_dataloader(self):
                return DataLoader(self.train_set, num_workers=self.num_workers)
        """)  # fmt: skip
    main = write(tmp_path, "main.py", "cli = LightningCLI(MyModel, MyDataModule)\n")
    assert find([main, module]).flag == "--data.num_workers"
    assert find([module]).flag is None  # no LightningCLI: built elsewhere


def test_files_are_read_once_and_big_ones_skipped(tmp_path):
    path = write(tmp_path, "train.py", "loader = DataLoader(ds, num_workers=4)\n")
    sources = SourceLines()
    first = sources.loader_call(os.getpid(), [path], None)
    Path(path).write_text("\n" + Path(path).read_text())
    assert first is not None and sources.loader_call(os.getpid(), [path], None) == first
    big = write(tmp_path, "big.py", "loader = DataLoader(ds, num_workers=4)\n" + "#\n" * MAX_SOURCE_BYTES)
    assert find([big]) is None
    assert find([str(tmp_path / "missing.py")]) is None


def test_the_advice_names_the_users_own_call_or_flag():
    """The change reads as the user makes it: their builder's keyword, or the flag their script reads."""
    import dataclasses

    from dltop.diagnose.figures import loader_change
    from tests.windows import bound_window

    loader = bound_window(80.0, workers=1)[-1].loaders[0]
    timm = dataclasses.replace(loader, built_at="train.py:120", built_by="create_loader", workers_keyword="num_workers")
    assert loader_change(timm, num_workers=3) == (
        "num_workers=3  # in create_loader(...) (train.py:120), which builds the DataLoader over Images;"
        " now num_workers=1"
    )
    flagged = dataclasses.replace(timm, workers_flag="--workers")
    assert loader_change(flagged, num_workers=3).startswith(
        "--workers 3 on the command line  # train.py:120 passes it to create_loader as num_workers"
    )
    hf = dataclasses.replace(loader, built_at="run.py:40", built_by="TrainingArguments",
                             workers_keyword="dataloader_num_workers")  # fmt: skip
    assert loader_change(hf, num_workers=4, persistent_workers=True).startswith(
        "dataloader_num_workers=4, dataloader_persistent_workers=True  # in TrainingArguments(...) (run.py:40)"
    )
    plain = dataclasses.replace(loader, built_at="train.py:88", built_by="DataLoader", workers_keyword="num_workers")
    expected = "num_workers=2  # in the DataLoader over Images (train.py:88); now num_workers=1"
    assert loader_change(plain, num_workers=2) == expected


def test_torchdata_parallel_mapper_sets_num_workers_from_its_flag(tmp_path):
    path = write(tmp_path, "train.py", """\
        import argparse
        from torchdata.nodes import Loader, ParallelMapper
        parser = argparse.ArgumentParser()
        parser.add_argument("--workers", type=int, default=2)
        args = parser.parse_args()
        node = ParallelMapper(source, map_fn=decode, num_workers=args.workers, method="thread")
        """)  # fmt: skip
    assert find([path]) == LoaderSite(at(path, "ParallelMapper("), "ParallelMapper", "num_workers", "torchdata",
                                      "--workers")  # fmt: skip


def test_an_spdl_stage_sets_its_concurrency(tmp_path):
    path = write(tmp_path, "train.py", """\
        from spdl.pipeline import PipelineBuilder
        pipe(decode)  # a function named pipe is no stage, nor is this: .pipe(
        pipeline = (
            PipelineBuilder()
            .add_source(range(100))
            .pipe(decode, concurrency=concurrency)
            .add_sink(3)
            .build(num_threads=4)
        )
        """)  # fmt: skip
    site = find([path])
    assert site is not None and site.call == "pipe" and site.keyword == "concurrency" and site.library == "spdl"
    # pandas' .pipe( is no stage: a file that does not import spdl has none
    assert site.where == at(path, ".pipe(decode")
    other = write(tmp_path, "etl.py", "df = df.pipe(clean, concurrency=2)\n")
    assert find([other]) is None


def test_a_thread_pool_sets_max_workers_unless_a_loader_is_built_there(tmp_path):
    path = write(tmp_path, "prefetch.py", """\
        from concurrent.futures import ThreadPoolExecutor
        class Prefetcher:
            def __init__(self, n):
                self.pool = ThreadPoolExecutor(max_workers=n)
        """)  # fmt: skip
    assert find([path]) == LoaderSite(at(path, "ThreadPoolExecutor("), "ThreadPoolExecutor", "max_workers",
                                      "concurrent.futures")  # fmt: skip
    # a pool beside a loader's builder is some other pool of the script (checkpoints, logging)
    train = write(
        tmp_path, "train.py", "saver = ThreadPoolExecutor(max_workers=1)\nloader = create_loader(ds, num_workers=4)\n"
    )
    assert find([train]).call == "create_loader"
