"""Package data that lives outside the package in git.

`policies/`, `infra/` and `data/traces/` stay at the repository's top level (the Pulumi project
needs its own folder, and people edit policies where they expect them). The wheel carries them
under `provisioner/_bundled/` by mapping each folder to a package directory at build time, so
there is one copy in git; `provisioner.data_files` finds them in either place. Which files each
carries is `[tool.setuptools.package-data]` in pyproject.toml; everything else about the build is
there too.
"""

from setuptools import find_packages, setup

BUNDLED = {
    "provisioner._bundled.policies": "policies",
    "provisioner._bundled.infra": "infra",
    "provisioner._bundled.traces": "data/traces",
}
# Their subfolders, as packages too: setuptools ships a folder's files only through a package.
SUBFOLDERS = [
    "provisioner._bundled.policies.catalog",
    "provisioner._bundled.policies.demo",
    "provisioner._bundled.policies.demo.slurm",
    "provisioner._bundled.policies.policypack",
    "provisioner._bundled.infra.bootstrap",
]

setup(
    packages=[*find_packages(include=["provisioner", "provisioner.*"]), *BUNDLED, *SUBFOLDERS],
    package_dir=BUNDLED,
)
