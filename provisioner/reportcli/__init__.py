"""`provisioner costs|budgets|decisions`: the console's reports as terminal tables."""
