"""What of a command line may leave the node (dltop/redact.py): the job's identity stays, secrets go."""

from __future__ import annotations

import pytest

from dltop.redact import REDACTED, looks_random, redact_argv, redact_command

HF_TOKEN = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["python", "train.py", f"--hf-token={HF_TOKEN}", "--db-url=postgres://u:pw@h/db", "--lr", "0.1"],
         "python train.py --hf-token=*** --db-url=postgres://***@h/db --lr 0.1"),
        (["python", "train.py", "--api-key", "Zx8Kq2mP9vR4tY7wB3nL6hJ1", "--epochs", "3"],
         "python train.py --api-key *** --epochs 3"),
        (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py",
          "--data", "s3://bucket/x.tar?X-Amz-Signature=abcdef123&X-Amz-Date=20240101"],
         "python -m torch.distributed.run --nproc-per-node 2 train.py"
         " --data s3://bucket/x.tar?X-Amz-Signature=***&X-Amz-Date=20240101"),
        (["env", "HF_TOKEN=abc", "python", "x.py", "db.password=hunter2", "trainer.max_epochs=10"],
         "env HF_TOKEN=*** python x.py db.password=*** trainer.max_epochs=10"),
        (["python", "x.py", "https://ghp_token123@github.com/o/r.git", f"--model={HF_TOKEN}"],
         "python x.py https://***@github.com/o/r.git --model=***"),
        (["python", "x.py", "--password", "--verbose"], "python x.py --password --verbose"),  # a flag, no value
        # a title rewritten by setproctitle: the whole command line in one string
        ([f"python train.py --hf-token {HF_TOKEN} --lr 0.1"], "python train.py --hf-token *** --lr 0.1"),
        (["python", "x.py", "--db=postgres://u:p@ss@h/db"], "python x.py --db=postgres://***@h/db"),  # an @ inside
        (["python", "x.py", "--header", "Authorization: Bearer abc123"],
         "python x.py --header Authorization: Bearer ***"),
        (["python", "x.py", "-c", '{"password": "hunter2", "lr": 3}'], 'python x.py -c {"password": "***", "lr": 3}'),
        (["python", "x.py", "--k", "aB3dE6gH9jK2mN5pQ8sT1vW4/yZ7+bC0="], "python x.py --k ***"),  # base64 with a /
    ],
)  # fmt: skip
def test_secrets_are_redacted_and_the_job_still_reads_as_itself(argv, shown):
    assert redact_command(argv) == shown


def test_identifiers_stay_whole():
    argv = ["python", "/data/runs/exp-2024-05-01/train.py", "--run-id", "3f9c2e1a-7b4d-4e8f-9a1b-2c3d4e5f6a7b",
            "--commit", "9fceb02d0ae598e95dc970b74767f19372d61af8", "--model", "bert-base-uncased-finetuned-sst-2",
            "--sort-key", "name", "--config-name", "ImageNet1kTrainingConfigurationV2", "--lr", "3e-4",
            "--cache", "/data/token/cache", "--tokenizer=bert-base", "runs/exp1/ckptA9"]  # fmt: skip
    assert redact_argv(argv) == argv


def test_a_random_value_is_caught_without_a_telling_name():
    assert looks_random("Zx8Kq2mP9vR4tY7wB3nL6hJ1") and looks_random(HF_TOKEN)
    assert not looks_random("ImageNet1kTrainingConfigurationV2")  # words: low entropy
    assert redact_argv(["python", "x.py", "--weights", "Zx8Kq2mP9vR4tY7wB3nL6hJ1"])[-1] == REDACTED
