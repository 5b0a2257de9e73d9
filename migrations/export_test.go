package migrations

// RepairVersion is repairVersion, for the tests.
const RepairVersion = repairVersion
