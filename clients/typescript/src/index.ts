// @creative-memory/client: a thin typed wrapper on openapi-fetch over the daemon's HTTP API
// (docs/typescript-client.md). Request and response types come from src/openapi.ts, which
// scripts/generate.mjs generates from the daemon's OpenAPI document; nothing here restates
// a body shape. Every non-2xx answer throws a ProblemError subclass (src/errors.ts).
import createClient, { type Client } from "openapi-fetch";
import { problemError, TransportError } from "./errors.js";
import type { components, operations, paths } from "./openapi.js";

export * from "./errors.js";
export type { components, operations, paths } from "./openapi.js";

type Schemas = components["schemas"];
export type Health = Schemas["Health"];
export type OpenApiDoc = Schemas["OpenApiDoc"];
export type MemoryView = Schemas["MemoryView"];
export type SettingsView = Schemas["SettingsView"];
export type SettingsChange = Schemas["SettingsChange"];
export type Preference = Schemas["Preference"];
export type WireEvent = Schemas["WireEvent"];
export type IngestResult = Schemas["IngestResult"];
export type ComposeRequest = Schemas["ComposeRequest"];
export type PromptResult = Schemas["PromptResult"];
export type ForgetResult = Schemas["ForgetResult"];
export type Explanation = Schemas["Explanation"];
export type Timeline = Schemas["Timeline"];
export type TimelineEvent = Schemas["TimelineEvent"];
export type ResetRequest = Schemas["ResetRequest"];
export type ResetResult = Schemas["ResetResult"];
export type CheckResult = Schemas["CheckResult"];
export type LogProblem = Schemas["LogProblem"];
export type RepairRequest = Schemas["RepairRequest"];
export type RepairResult = Schemas["RepairResult"];
export type Archive = Schemas["Archive"];
export type ImportResult = Schemas["ImportResult"];
export type AsOf = Schemas["AsOf"];
export type DerivationInfo = Schemas["DerivationInfo"];
export type VersionChange = Schemas["VersionChange"];
export type DerivationRequest = Schemas["DerivationRequest"];
export type SettingsUpdate = Schemas["SettingsUpdate"];
export type PreviewResult = Schemas["PreviewResult"];
export type PromptChange = Schemas["PromptChange"];
export type RecordChange = Schemas["RecordChange"];
export type InjectionChange = Schemas["InjectionChange"];
/** A derivation version the daemon knows (the OpenAPI document's enum). */
export type DerivationVersion = DerivationRequest["version"];

type PromptQuery = NonNullable<operations["prompt"]["parameters"]["query"]>;
/** Which memory block GET /api/v1/prompt returns. */
export type PromptVariant = NonNullable<PromptQuery["variant"]>;
/** How POST /api/v1/import combines the archive with the stored memory. */
export type ImportMode = NonNullable<NonNullable<operations["import"]["parameters"]["query"]>["mode"]>;

/** The daemon's address when nothing else is given (`creative-memory serve`'s default). */
export const DEFAULT_BASE_URL = "http://127.0.0.1:7744";

/** How to reach the daemon. */
export interface ClientOptions {
  /** The daemon's base URL; default http://127.0.0.1:7744. */
  baseUrl?: string;
  /** The bearer token (`creative-memory token`). */
  token?: string;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
  /** A fetch implementation (default: the global fetch). */
  fetch?: (input: Request) => Promise<Response>;
}

/** A project: absent, null or "" all mean no project (the global memory). */
export interface ProjectOption {
  projectId?: string | null;
}

/**
 * A point in the past (docs/time-travel.md): right after event `atSeq`, or as of the ISO 8601
 * time `asOf` (a bare date is its midnight UTC). Give at most one; absent means now.
 */
export interface PointOption {
  atSeq?: number | null;
  asOf?: string | null;
}

/** The memory block to retrieve. */
export interface PromptOptions extends ProjectOption, PointOption {
  variant?: PromptVariant;
}

/**
 * A host prompt to compose; `format` is chosen by the method (composePrompt / composePromptText).
 * `atSeq` / `asOf` compose with the memory block as it was then (sent in the query).
 */
export type ComposeOptions = Omit<ComposeRequest, "format"> & PointOption;

type Outcome<D> = { data?: D; error?: unknown; response: Response };

function project(options: ProjectOption | undefined): { project_id?: string } {
  const id = options?.projectId;
  return id ? { project_id: id } : {};
}

function point(options: PointOption | undefined): { at_seq?: number; as_of?: string } {
  const out: { at_seq?: number; as_of?: string } = {};
  if (options?.atSeq !== undefined && options.atSeq !== null) out.at_seq = options.atSeq;
  if (options?.asOf !== undefined && options.asOf !== null) out.as_of = options.asOf;
  return out;
}

/** The daemon's HTTP API, one method per operation of its OpenAPI document. */
export class CreativeMemoryClient {
  /** The openapi-fetch client underneath, for anything the methods do not cover. */
  readonly raw: Client<paths>;
  /** The daemon's base URL (no trailing slash). */
  readonly baseUrl: string;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, "");
    const headers: Record<string, string> = { ...options.headers };
    if (options.token) headers.Authorization = `Bearer ${options.token}`;
    this.raw = createClient<paths>({
      baseUrl: this.baseUrl,
      headers,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
  }

  private async run<D>(send: () => Promise<Outcome<D>>): Promise<D> {
    let outcome: Outcome<D>;
    try {
      outcome = await send();
    } catch (cause) {
      const why = cause instanceof Error ? cause.message : String(cause);
      throw new TransportError(`cannot reach the daemon at ${this.baseUrl}: ${why}`, cause);
    }
    if (!outcome.response.ok) throw problemError(outcome.error, outcome.response);
    return outcome.data as D;
  }

  /** GET /healthz: liveness (no credentials needed). */
  health(): Promise<Health> {
    return this.run(() => this.raw.GET("/healthz"));
  }

  /** GET /openapi.json: the daemon's OpenAPI document. */
  openapi(): Promise<OpenApiDoc> {
    return this.run(() => this.raw.GET("/openapi.json"));
  }

  /** POST /api/v1/events: ingest one event or up to 1000; each is judged on its own. */
  ingestEvents(events: WireEvent | WireEvent[]): Promise<IngestResult> {
    return this.run(() => this.raw.POST("/api/v1/events", { body: events }));
  }

  /** GET /api/v1/prompt?format=json: the memory block for a project, with its diagnostics. */
  prompt(options: PromptOptions = {}): Promise<PromptResult> {
    const query: PromptQuery = { ...project(options), ...point(options), format: "json" };
    if (options.variant) query.variant = options.variant;
    return this.run(
      () => this.raw.GET("/api/v1/prompt", { params: { query } }) as Promise<Outcome<PromptResult>>,
    );
  }

  /** GET /api/v1/prompt: the memory block alone, as text ("" when there is none). */
  async promptText(options: PromptOptions = {}): Promise<string> {
    const query: PromptQuery = { ...project(options), ...point(options), format: "text" };
    if (options.variant) query.variant = options.variant;
    // an empty block is an empty body, which openapi-fetch reads as no data at all
    const text = await this.run(() => this.raw.GET("/api/v1/prompt", { params: { query }, parseAs: "text" }));
    return text ?? "";
  }

  /** POST /api/v1/prompt (JSON): the host prompt with the memory block inserted, and the block (now or at a point). */
  composePrompt(request: ComposeOptions): Promise<PromptResult> {
    const { atSeq, asOf, ...rest } = request;
    const body: ComposeRequest = { ...rest, format: "json" };
    const query = point({ atSeq, asOf });
    return this.run(
      () => this.raw.POST("/api/v1/prompt", { body, params: { query } }) as Promise<Outcome<PromptResult>>,
    );
  }

  /** POST /api/v1/prompt (text): the host prompt with the memory block inserted (now or at a point). */
  async composePromptText(request: ComposeOptions): Promise<string> {
    const { atSeq, asOf, ...rest } = request;
    const body: ComposeRequest = { ...rest, format: "text" };
    const query = point({ atSeq, asOf });
    const text = await this.run(() =>
      this.raw.POST("/api/v1/prompt", { body, params: { query }, parseAs: "text" }),
    );
    return text ?? "";
  }

  /** GET /api/v1/memory: everything in the user's memory (records, settings, retrieval), now or at a point. */
  inspect(options: ProjectOption & PointOption = {}): Promise<MemoryView> {
    const query = { ...project(options), ...point(options) };
    return this.run(() => this.raw.GET("/api/v1/memory", { params: { query } }));
  }

  /** GET /api/v1/explain/{type}/{pattern}: why a pattern is (or is not) in the memory block. */
  explain(
    preferenceType: string,
    pattern: string,
    options: ProjectOption & PointOption = {},
  ): Promise<Explanation> {
    return this.run(() =>
      this.raw.GET("/api/v1/explain/{preference_type}/{pattern}", {
        params: {
          path: { preference_type: preferenceType, pattern },
          query: { ...project(options), ...point(options) },
        },
      }),
    );
  }

  /** GET /api/v1/timeline/{type}/{pattern}: the events of evidence about a pattern, read from the log (no derivation). */
  timeline(
    preferenceType: string,
    pattern: string,
    options: ProjectOption & PointOption = {},
  ): Promise<Timeline> {
    return this.run(() =>
      this.raw.GET("/api/v1/timeline/{preference_type}/{pattern}", {
        params: {
          path: { preference_type: preferenceType, pattern },
          query: { ...project(options), ...point(options) },
        },
      }),
    );
  }

  /** GET /api/v1/derivation: the derivation version in force, the default, the known versions, the switches. */
  derivation(): Promise<DerivationInfo> {
    return this.run(() => this.raw.GET("/api/v1/derivation"));
  }

  /** POST /api/v1/derivation: switch the user's derivation version (reversible; `changed` false for a no-op). */
  useDerivation(version: DerivationVersion): Promise<SettingsUpdate> {
    return this.run(() => this.raw.POST("/api/v1/derivation", { body: { version } }));
  }

  /** GET /api/v1/derivation/preview: what switching to `version` would change. Writes nothing. */
  previewDerivation(version: DerivationVersion, options: ProjectOption = {}): Promise<PreviewResult> {
    const query = { ...project(options), version };
    return this.run(() => this.raw.GET("/api/v1/derivation/preview", { params: { query } }));
  }

  /** DELETE /api/v1/preferences/{type}/{pattern}: erase every raw event about a pattern. */
  forget(preferenceType: string, pattern: string, options: ProjectOption = {}): Promise<ForgetResult> {
    return this.run(() =>
      this.raw.DELETE("/api/v1/preferences/{preference_type}/{pattern}", {
        params: { path: { preference_type: preferenceType, pattern }, query: project(options) },
      }),
    );
  }

  /** GET /api/v1/settings: the user's settings. */
  getSettings(): Promise<SettingsView> {
    return this.run(() => this.raw.GET("/api/v1/settings"));
  }

  /** POST /api/v1/settings: change several settings at once (absent keys stay). */
  changeSettings(change: SettingsChange): Promise<SettingsView> {
    return this.run(() => this.raw.POST("/api/v1/settings", { body: change }));
  }

  /** POST /api/v1/reset: erase a scope for real (`confirm: true` is required). */
  reset(request: ResetRequest): Promise<ResetResult> {
    return this.run(() => this.raw.POST("/api/v1/reset", { body: request }));
  }

  /** GET /api/v1/check: what is wrong with the user's stored log and settings (`healthy` when nothing). Writes nothing. */
  check(): Promise<CheckResult> {
    return this.run(() => this.raw.GET("/api/v1/check"));
  }

  /**
   * POST /api/v1/repair: rewrite a damaged log without the lines that are not events
   * (`confirm: true` is required; a healthy log is left as it is: `repaired` false).
   */
  repair(request: RepairRequest): Promise<RepairResult> {
    return this.run(() => this.raw.POST("/api/v1/repair", { body: request }));
  }

  /**
   * GET /api/v1/export: the user's memory as an archive (raw events and settings), parsed.
   * To import it again, use exportArchiveText: parsing can change the numbers the archive's
   * checksum covers (`1.0` becomes `1`, an integer above 2^53 loses precision).
   */
  exportArchive(): Promise<Archive> {
    return this.run(() => this.raw.GET("/api/v1/export"));
  }

  /** GET /api/v1/export: the archive's JSON text exactly as the daemon sent it (for importArchive). */
  async exportArchiveText(): Promise<string> {
    const text = await this.run(() => this.raw.GET("/api/v1/export", { parseAs: "text" }));
    return text ?? "";
  }

  /**
   * POST /api/v1/import: load an archive (`merge`, the default, or `replace`). A string or bytes
   * (from exportArchiveText) is sent unchanged, as application/json; an Archive object is
   * serialized with JSON.stringify.
   */
  importArchive(
    archive: Archive | string | Uint8Array,
    options: { mode?: ImportMode } = {},
  ): Promise<ImportResult> {
    const query = options.mode ? { mode: options.mode } : {};
    if (typeof archive === "string" || archive instanceof Uint8Array) {
      const raw = archive;
      return this.run(() =>
        this.raw.POST("/api/v1/import", {
          body: raw as unknown as Archive,
          bodySerializer: () => raw,
          headers: { "Content-Type": "application/json" },
          params: { query },
        }),
      );
    }
    return this.run(() => this.raw.POST("/api/v1/import", { body: archive, params: { query } }));
  }
}

/** A client for the daemon at `baseUrl` with `token` (see ClientOptions). */
export function createCreativeMemoryClient(options: ClientOptions = {}): CreativeMemoryClient {
  return new CreativeMemoryClient(options);
}
