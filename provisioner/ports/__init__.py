"""The narrow Protocols that consumers take instead of concrete classes: the store's
repositories (`provisioner.ports.store`). Below act/, register/ and the store in the layers, so
any of them may name a port without importing the store."""
