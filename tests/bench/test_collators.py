"""The collator benchmark runs and reports the fields `hf-xfmr bench` reads (timing is not asserted)."""

from hf_xfmr.bench.collators import benchmark_collators, markdown_table


def test_benchmark_rows():
    rows = benchmark_collators(batch_size=2, seq_len=64, repeats=1, warmup=0)
    assert [r["reference"] for r in rows] == ["DataCollatorForPermutationLanguageModeling"] * 3 + [
        "DataCollatorForLanguageModeling"]
    assert all(r["threads"] >= 1 for r in rows)
    for r in rows:
        assert r["ours_per_s"] > 0 and r["ref_per_s"] > 0 and r["ratio"] > 0
    assert markdown_table(rows).count("\n") == len(rows) + 1
