package lowering

// RunStages is runStages for the external tests, which use bindings/tensor.
var RunStages = runStages
