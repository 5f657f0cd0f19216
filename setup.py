"""Which packages the wheel carries: vitlab's own (found, so a new folder ships without an edit here) and the
repository's top-level ``app/`` and ``assets/`` as ``vitlab._app`` and ``vitlab._assets``.

pyproject.toml maps those two names onto the folders (``package-dir``) and lists the bundled files
(``package-data``); everything else about the project is there too. The list lives here because pyproject.toml
takes either a ``find`` or a list of packages, not both. vitlab.resources finds the folders again at run time,
through the package, in a wheel and in an editable install alike.
"""

from setuptools import find_packages, setup

# the data folders whose names Python could import are listed as (data-only) packages too, as setuptools asks
setup(packages=[*find_packages(include=["vitlab", "vitlab.*"]),
                "vitlab._app", "vitlab._app.lab", "vitlab._app.views",
                "vitlab._assets", "vitlab._assets.zoo", "vitlab._assets.samples"])
