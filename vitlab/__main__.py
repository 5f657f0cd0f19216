from .cli import main

if __name__ == "__main__":  # not in a spawned input worker process, which imports this module as __mp_main__
    raise SystemExit(main())
