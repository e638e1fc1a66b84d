"""`python -m stagegan ...` and the `stagegan` console script."""

import sys


def main(argv=None):
    from stagegan.cli.main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
