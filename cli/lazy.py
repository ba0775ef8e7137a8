"""How the command line loads only what a command uses: ``logstore --version`` and ``logstore --help``
load click and the command line's own modules, never the engine, the server, the client or a benchmark
(``tests/cli/test_cli_imports.py`` pins which modules they may load).

- the root group (``cli.main.LogstoreGroup``) imports a subcommand that lives in another module of
  the command line when it is first asked for (``logstore perf ...`` loads ``cli.perf``, nothing
  else does);
- ``DeferredCommand``: a command whose options, or whose help epilog, need values from a module its
  group's help must not load (the SCRAM iteration bounds, the topic configs' table): they are built
  when the command itself is parsed, completed or shown.

Every command module imports its implementation inside the command function, so a group's help,
which imports the modules of its subcommands for their short help, loads none of it. No logic lives
here.
"""

from __future__ import annotations

from typing import Callable

import click


class DeferredCommand(click.Command):
    """A command whose ``deferred_params()`` (options built from values of a module loaded only
    then) join its parameters the first time they are needed: to parse its arguments, complete
    them, or show its help. ``epilog`` may be a callable too, called only to show the help."""

    def __init__(self, *args, deferred_params: Callable[[], list[click.Parameter]] | None = None,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._deferred_params = deferred_params

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._deferred_params is not None:
            build, self._deferred_params = self._deferred_params, None
            self.params.extend(build())
        return super().get_params(ctx)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if callable(self.epilog):
            self.epilog = self.epilog()
        super().format_epilog(ctx, formatter)
