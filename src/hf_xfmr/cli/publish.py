"""`hf-xfmr publish`: an exported folder uploaded to the Hugging Face Hub in one commit."""

import argparse
from dataclasses import dataclass

from ..options import option
from .command import Command, CommandError


@dataclass
class PublishArguments:
    folder: str = option("exported folder (hf-xfmr export)", positional=True, metavar="FOLDER")
    repo_id: str = option("Hub repository, e.g. alice/tiny-bert", metavar="OWNER/NAME")
    revision: str | None = option("branch to commit to, created from main if missing (default: main)", None,
                                  metavar="BRANCH")
    private: bool = option("create the repository as private (if it is new)", False)
    create_pr: bool = option("open a pull request instead of committing directly", False)
    commit_message: str | None = option("commit message (default: 'Upload <class> with hf_xfmr')", None)
    keep_stale: bool = option("keep repository files that FOLDER does not have (default: delete them in the "
                              "commit)", False)
    max_retries: int = option("retries of transient failures: timeouts, connection errors, HTTP 408/429/5xx "
                              "(default: 3)", 3, metavar="N")


def run(options: PublishArguments, args: argparse.Namespace) -> int:
    import hf_xfmr.hub as hub  # `hub.publish` at call time: tests replace it

    try:
        commit = hub.publish(
            options.folder, options.repo_id, revision=options.revision, private=True if options.private else None,
            create_pr=options.create_pr, commit_message=options.commit_message, max_retries=options.max_retries,
            delete_stale=not options.keep_stale,
        )
    except hub.PublishError as err:
        raise CommandError(str(err)) from None
    where = f"{options.repo_id}@{options.revision or 'main'}"
    if commit.pr_url:
        print(f"opened a pull request on {where}: {commit.pr_url}")
    else:
        print(f"published {options.folder} to {where}: {commit.commit_url}")
    return 0


COMMAND = Command(
    "publish",
    help="upload an exported folder to the Hugging Face Hub in one commit",
    description=(
        "Upload FOLDER (written by `hf-xfmr export`) to the Hub repository --repo-id, creating it if needed,\n"
        "in ONE commit: large files go up first (Xet, or LFS with HF_HUB_DISABLE_XET=1), and the commit is\n"
        "made only when all of them arrived. Unchanged files are not uploaded again; files of an earlier\n"
        "publish that FOLDER no longer has are deleted in the same commit. Transient failures are retried.\n"
        "The token comes from HF_TOKEN or `hf auth login` (never printed); HF_ENDPOINT picks the Hub."
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr publish ./export/bert-mlm --repo-id alice/tiny-bert\n"
        "  hf-xfmr publish ./export/sst2 --repo-id my-org/bert-sst2 --private\n"
        "  hf-xfmr publish ./export/sst2 --repo-id my-org/bert-sst2 --revision v2 --create-pr"
    ),
    arguments=PublishArguments,
    run=run,
)
