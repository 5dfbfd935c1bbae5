"""The package's version, its one source: hatch reads it for the wheel and sdist metadata
(`pip show`), `liftbridge --version` and ``liftbridge_client.__version__`` import it, and
`make release-check` (scripts/release_check.py) holds it against CHANGELOG.md's top
version section and the tag ``v<version>``."""

__version__ = "0.3.1.dev0"
