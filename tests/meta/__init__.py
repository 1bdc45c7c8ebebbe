"""Meta-tests: each property is shown to fail on a deliberately broken policy, admission
rule or implementation, so a property that cannot fail is caught."""
