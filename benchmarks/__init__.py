"""The benchmarks, by what they measure, run from the repository root as
`python -m benchmarks.GROUP.NAME` (BENCHMARKS.md's index lists each, and where a new one goes)."""
