// Errors of the creative-memory client (docs/typescript-client.md, "Errors"): every answer
// that is not 2xx becomes a typed exception carrying the problem+json document (RFC 9457).
import type { components } from "./openapi.js";

/** The problem+json body of every error answer (the daemon's `ProblemDoc` schema). */
export type ProblemDoc = components["schemas"]["ProblemDoc"];

/** Any failure of a client call: the daemon's problem answers and transport failures. */
export class CreativeMemoryError extends Error {
  override name = "CreativeMemoryError";
}

/** The daemon could not be reached (connection refused, DNS, aborted request). */
export class TransportError extends CreativeMemoryError {
  override name = "TransportError";

  constructor(
    message: string,
    override readonly cause: unknown,
  ) {
    super(message);
  }
}

/** An error answer of the daemon: `status`, `field` (the offending input) and `detail`. */
export class ProblemError extends CreativeMemoryError {
  override name = "ProblemError";
  /** The HTTP status (422, 404, 401, ...). */
  readonly status: number;
  /** The problem type URI (`.../invalid-request`). */
  readonly type: string;
  /** The short summary (`Invalid request`). */
  readonly title: string;
  /** What went wrong, for a person. */
  readonly detail: string;
  /** The input that was wrong (a body key, query or path parameter), or null. */
  readonly field: string | null;
  /** On a 500: the id that finds the failure in the daemon's log. */
  readonly correlationId: string | null;
  /** The whole problem document as the daemon sent it. */
  readonly problem: ProblemDoc;
  /** The HTTP response (its body already read). */
  readonly response: Response;

  constructor(problem: ProblemDoc, response: Response) {
    super(problem.field ? `${problem.status} ${problem.field}: ${problem.detail}` : `${problem.status}: ${problem.detail}`);
    this.problem = problem;
    this.response = response;
    this.status = problem.status;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = problem.detail;
    this.field = problem.field ?? null;
    this.correlationId = problem.correlation_id ?? null;
  }
}

/** 422: invalid input; `field` names it. */
export class ValidationProblem extends ProblemError {
  override name = "ValidationProblem";
}

/** 404: nothing matches (explain of an unknown pattern). */
export class NotFoundProblem extends ProblemError {
  override name = "NotFoundProblem";
}

/** 409: the request conflicts with the stored state. */
export class ConflictProblem extends ProblemError {
  override name = "ConflictProblem";
}

/** 401 or 403: missing or wrong token, or a foreign Host header. */
export class AuthProblem extends ProblemError {
  override name = "AuthProblem";
}

/** 400, 413, 415: the request itself is malformed, too large or not JSON. */
export class RequestProblem extends ProblemError {
  override name = "RequestProblem";
}

/** 500 or 503: the daemon failed (`correlationId`) or is shutting down. */
export class ServerProblem extends ProblemError {
  override name = "ServerProblem";
}

/** The problem type of a 500 caused by a damaged stored log. */
export const LOG_DAMAGED = "urn:creative-memory:problem:log-damaged";

/** 500 `log-damaged`: the stored memory was changed outside creative-memory; `check()`
 * lists what is wrong and `repair({ confirm: true })` mends it. */
export class LogDamagedProblem extends ServerProblem {
  override name = "LogDamagedProblem";
}

function isProblem(body: unknown): body is ProblemDoc {
  if (typeof body !== "object" || body === null) return false;
  const b = body as Record<string, unknown>;
  return typeof b.status === "number" && typeof b.title === "string" && typeof b.detail === "string";
}

/** The typed exception for an error answer; a body that is not problem+json is described. */
export function problemError(body: unknown, response: Response): ProblemError {
  const problem: ProblemDoc = isProblem(body)
    ? body
    : {
        type: "about:blank",
        title: response.statusText || `HTTP ${response.status}`,
        status: response.status,
        detail: typeof body === "string" && body ? body : `HTTP ${response.status} without a problem document`,
        field: null,
        correlation_id: null,
      };
  const status = response.status;
  const Kind =
    status === 422
      ? ValidationProblem
      : status === 404
        ? NotFoundProblem
        : status === 409
          ? ConflictProblem
          : status === 401 || status === 403
            ? AuthProblem
            : status === 500 && problem.type === LOG_DAMAGED
              ? LogDamagedProblem
              : status >= 500
                ? ServerProblem
                : status >= 400
                  ? RequestProblem
                  : ProblemError;
  return new Kind(problem, response);
}
