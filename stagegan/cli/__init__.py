"""The command line: `python -m stagegan train | launch | plan | sample | eval | prepare`."""
