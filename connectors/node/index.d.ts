// Types for queue-manager-connector (hand-written; the package has no build step).
import type { IncomingMessage, ServerResponse } from 'node:http';

export type FailoverReason = 'timeout' | 'unreachable' | 'invalid-response' | `http-${number}`;

export interface FailOpenEvent {
  /** The value of the X-QM-Failover header put on the response. */
  reason: FailoverReason;
  roomId: string;
}

export interface GateOptions {
  /** The queue's public address, e.g. "https://queue.example.com" (no trailing path). */
  queueUrl: string;
  /** The room id, exactly as created in the console. */
  roomId: string;
  /** The server's PUBLIC_API_KEY, sent as Authorization: Bearer (never in the URL). */
  key: string;
  /** How long a check may take before the request fails open (default 2000). */
  timeoutMs?: number;
  /**
   * Proxies in front of this app: true (one) or a number of hops. The visitor's address is then read
   * from X-Forwarded-For (that many entries from the right), the scheme and host from
   * X-Forwarded-Proto and X-Forwarded-Host. Unset: the socket address and the Host header.
   */
  trustProxy?: boolean | number;
  /** Called on every fail-open, after X-QM-Failover is set; its errors are ignored. */
  onFailOpen?: (event: FailOpenEvent) => void | Promise<void>;
  /**
   * How often the room's revocation list of edge passes is fetched once the queue hands out edge
   * passes (PASS_SIGNING=ed25519), in ms (default 5000): a revoked pass is refused here within this.
   */
  revokedRefreshMs?: number;
}

/** Why a pass was not accepted locally (the queue was asked instead). */
export type PassRefusal =
  | 'not_ready'
  | 'malformed'
  | 'unknown_kid'
  | 'bad_signature'
  | 'wrong_room'
  | 'expired'
  | 'revoked'
  | 'unbound';

export interface GateStats {
  /** Requests admitted on an edge pass verified here, without asking the queue. */
  local: number;
  /** Door checks asked of the queue. */
  checks: number;
  /** Edge passes not accepted here, by reason. */
  refused: Partial<Record<PassRefusal, number>>;
  /** Requests one of the room's access rules refused (403 access_blocked), answered here. */
  blocked: number;
}

/** What the wait is, in the body of a queued JSON answer (`GatedWait` in the queue's OpenAPI document). */
export type WaitState =
  | 'waiting'
  | 'scheduled'
  | 'passed'
  | 'paused'
  | 'not_in_line'
  | 'backend_down'
  | 'rate_limited';

/**
 * The body the gate answers (503, X-QM-Queued, Retry-After) to a request that is not shown as a page:
 * one that asks for JSON (Accept preferring application/json, X-Requested-With: XMLHttpRequest or
 * X-QM-Accept: json) or any other request that is not a navigation.
 */
export interface GatedWait {
  roomId: string;
  state: WaitState;
  /** The place in line (1 is next); null without one, and for a room whose queueing shows no position. */
  position: number | null;
  /** Seconds until the visitor's turn at the current rate; null when the line does not move or there is no place. */
  etaSec: number | null;
  /** Present only for a room whose queueing shows no position: the range the place lies in. */
  positionRange?: [number, number];
  /** Present only for a room whose queueing shows no position: the range the wait lies in (s). */
  etaRange?: [number, number];
  /** The room's state now (active, paused, bypass, scheduled); null when the queue did not say. */
  roomState: string | null;
  /** While scheduled: when the room opens (ms since the epoch). */
  opensAt: number | null;
  /** The same as the Retry-After header: when to ask again. */
  retryAfterSec: number;
  /** The waiting room, coming back to the address asked (qm_return). */
  waitingUrl: string;
  /** The same URL, by its earlier name. */
  waitUrl: string;
  /** Why the door said no (no_ticket, waiting, paused, at_capacity, expired, rate_limited, ...). */
  reason: string;
  code: 'queued' | 'storage_unavailable';
  error: string;
  reload: true;
}

/** true: continue to the app. false: the gate has answered (waiting room, queued JSON or hand-off). */
export interface Gate {
  (req: IncomingMessage, res: ServerResponse): Promise<boolean>;
  /** The same gate as Express/Connect middleware. */
  middleware(): Middleware;
  /** What the gate did so far. */
  readonly stats: GateStats;
  /** Stop refreshing the revocation list. */
  close(): void;
  /**
   * End this request's visitor's session at the queue (POST /api/sessions/revoke with the request's door key
   * and ticket, or its edge pass): true when a live session ended, false when there was none or the queue
   * could not be asked. Never rejects. Call it once the visitor is done (their order is complete).
   */
  revokeSession(req: IncomingMessage): Promise<boolean>;
}

/** Express/Connect middleware, with the gate's revokeSession. */
export interface Middleware {
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void;
  revokeSession(req: IncomingMessage): Promise<boolean>;
}

export function createGate(options: GateOptions): Gate;
export function middleware(options: GateOptions): Middleware;
/** Does this request skip the check (a static subresource: the four conditions of the Operations Guide)? */
export function skipsGate(method: string, path: string, secFetchDest?: string | null): boolean;
/** Will a browser show the answer to a person? (Never when the request asks for JSON.) */
export function isNavigation(req: IncomingMessage): boolean;
/** Does the request ask for JSON (Accept preferring application/json, X-Requested-With: XMLHttpRequest, X-QM-Accept: json)? */
export function wantsJson(req: IncomingMessage): boolean;
export const VERSION: string;

declare const connector: {
  createGate: typeof createGate;
  middleware: typeof middleware;
  skipsGate: typeof skipsGate;
  isNavigation: typeof isNavigation;
  wantsJson: typeof wantsJson;
  VERSION: string;
};
export default connector;
