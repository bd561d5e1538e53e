"""``python -m durable``: the ``durable`` command line (`durable.cli`)."""

from durable.cli import main

if __name__ == "__main__":
    main()
