"""The exception root of the harness."""


class FiredrillError(Exception):
    """Root of every deliberate error in the harness; the CLI prints these without a traceback."""


class PlaceholderError(FiredrillError, ValueError):
    """A value that a feature file's sentence cannot take: a usage error (``firedrill run`` exits 2).

    The placeholder parsers of the step vocabulary raise it with the bad ``value``, the ``problem`` and how to
    ``fix`` it; the feature check adds where (``file``, ``line``) and which ``placeholder`` with :meth:`at`.
    It is a ValueError too, so that pytest-bdd reads a sentence whose placeholder it refuses as not matching.
    """

    def __init__(self, value: str, problem: str, fix: str, *, placeholder: str = "", file: str = "",
                 line: int | None = None) -> None:
        self.value, self.problem, self.fix = value, problem, fix
        self.placeholder, self.file, self.line = placeholder, file, line
        super().__init__(str(self))

    def at(self, file: str = "", line: int | None = None, placeholder: str = "") -> "PlaceholderError":
        """The same error, placed in a feature file (and naming the placeholder, when the parser could not)."""
        return PlaceholderError(self.value, self.problem, self.fix, placeholder=self.placeholder or placeholder,
                                file=file or self.file, line=self.line if line is None else line)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line if self.line is not None else '?'}: " if self.file else ""
        what = f"<{self.placeholder}> {self.value!r}" if self.placeholder else repr(self.value)
        return f"{where}{what}: {self.problem}; {self.fix}"
