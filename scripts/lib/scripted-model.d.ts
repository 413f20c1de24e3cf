// Types of the scripted language model (scripts/lib/scripted-model.js), for the TypeScript examples.
export type ScriptedStep =
  | { toolCall: { toolName: string; input?: Record<string, unknown> } }
  | { text: string };
export interface ScriptedContext {
  prompt: unknown[];
  /** The text of the newest tool result, if any. */
  lastToolResult: string | undefined;
  callIndex: number;
}
export type ScriptedEntry = ScriptedStep | ((ctx: ScriptedContext) => ScriptedStep | Promise<ScriptedStep>);
/** An AI SDK LanguageModelV2 that answers from a fixed script (step i answers call i; the last step repeats). */
export interface ScriptedModel {
  readonly specificationVersion: 'v2';
  readonly provider: string;
  readonly modelId: string;
  readonly supportedUrls: Record<string, RegExp[]>;
  /** Every call's options, for assertions. */
  readonly calls: unknown[];
  doGenerate(options: any): PromiseLike<any>;
  doStream(options: any): PromiseLike<any>;
}
export declare function createScriptedModel(steps: ScriptedEntry[], options?: { modelId?: string }): ScriptedModel;
export declare function lastToolResult(prompt?: unknown[]): string | undefined;
