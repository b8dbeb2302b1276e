"""Running neural_arch inside other engines: ``integrations.ray`` (Ray Train's ``TorchTrainer``).

Each module here needs its engine installed (``pip install 'neural_arch[ray]'``) and is
imported only by the user; nothing else in the package imports this folder. Importing this
package has no side effects and imports no submodule.
"""
