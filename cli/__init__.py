"""The ``logstore`` command line (installed as ``logstore.cli``): parses arguments, calls the public
API, formats output. No logic lives here."""
