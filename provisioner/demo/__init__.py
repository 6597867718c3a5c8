"""`provisioner demo`: the controller on an embedded default (moto as AWS, a FAKE cluster)."""
