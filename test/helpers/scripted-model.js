// Test helper: the scripted language model now lives in scripts/lib/ (shared with the demo and the examples).
export * from '../../scripts/lib/scripted-model.js';
